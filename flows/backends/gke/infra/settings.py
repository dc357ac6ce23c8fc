"""The infra knobs, read once from the profile into one frozen value.

Why a separate value and not ``profile.gke`` directly: a few knobs (``authorized_cidr``,
``iam_mode``, the price table) are new profile fields; reading them here in one place means
the rest of flows/backends/gke/infra never guesses, and a profile without ``authorized_cidr`` fails
before anything is created. Paths (cache, working folder) are derived, never configured twice.
"""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from flows.backends.gke.infra.errors import user_error
from flows.config.profile import Profile
from flows.config.tpu import TPU_MACHINES, chips_in_topology

IamMode = Literal["project-storage-admin", "bucket-scoped"]
RELEASES_URL = "https://github.com/GoogleCloudPlatform/cluster-toolkit/releases/download"
BUNDLE_NAME = "gcluster_bundle_linux_amd64.tgz"
BLUEPRINT_EXAMPLE = "examples/gke-tpu-v6e/gke-tpu-v6e-advanced.yaml"
BLUEPRINT_FILE = "gke-tpu-v6e-advanced.yaml"
WORLD = "0.0.0.0/0"


class InfraSettings(BaseModel):
    model_config = ConfigDict(frozen=True)

    project: str
    region: str
    zone: str
    cluster: str
    bucket: str
    reservation: str
    machine_type: str
    topology: str
    nodepool_count: int
    cluster_toolkit_version: str
    authorized_cidr: str | None  # None only for teardown, which never applies the blueprint
    iam_mode: IamMode = "project-storage-admin"
    cluster_toolkit_sha256: str | None = None
    usd_per_chip_hour: float = 2.70
    cache_dir: Path
    releases_url: str = RELEASES_URL

    @property
    def chips_per_host(self) -> int:
        return TPU_MACHINES[self.machine_type].chips_per_host

    @property
    def total_chips(self) -> int:
        return chips_in_topology(self.topology) * self.nodepool_count

    @property
    def hosts_needed(self) -> int:
        return self.total_chips // self.chips_per_host

    @property
    def wl_sa(self) -> str:
        return f"{self.cluster}-gke-wl-sa@{self.project}.iam.gserviceaccount.com"

    @property
    def np_sa(self) -> str:
        return f"{self.cluster}-gke-np-sa@{self.project}.iam.gserviceaccount.com"

    @property
    def state_prefix(self) -> str:
        """Where the deployment folder lives between runs (object name prefix in the bucket)."""
        return f"tpurl/gcluster/{self.cluster}/"

    @property
    def workdir(self) -> Path:
        """gcluster runs here; the deployment folder is ``workdir / cluster``."""
        return self.cache_dir / "gcluster" / self.project / self.cluster

    @property
    def deployment_dir(self) -> Path:
        return self.workdir / self.cluster

    @property
    def bundle_url(self) -> str:
        return f"{self.releases_url}/{self.cluster_toolkit_version}/{BUNDLE_NAME}"

    @property
    def open_to_world(self) -> bool:
        if self.authorized_cidr is None:
            return False
        return ipaddress.ip_network(self.authorized_cidr, strict=False).prefixlen == 0


def default_cache_dir(environ: dict[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    if env.get("TPURL_CACHE_DIR"):
        return Path(env["TPURL_CACHE_DIR"])
    base = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tpurl"


def cidr_problem(cidr: str | None) -> str | None:
    if not cidr:
        return ("gke.authorized_cidr is not set: the control plane's allowed network must be "
                "chosen explicitly (the tutorial opens it to 0.0.0.0/0)")
    try:
        ipaddress.ip_network(cidr.strip(), strict=False)
    except ValueError:
        return f"gke.authorized_cidr {cidr!r} is not a CIDR such as 203.0.113.0/24"
    return None


CIDR_FIX = ("set gke.authorized_cidr to the network you run kubectl/the flow from, e.g. "
            "--set gke.authorized_cidr=203.0.113.7/32 (`curl ifconfig.me` shows your address); "
            "0.0.0.0/0 works but opens the control plane to the whole internet")


def world_open_warning(settings: InfraSettings) -> str | None:
    if not settings.open_to_world:
        return None
    return (f"WARNING: gke.authorized_cidr is {settings.authorized_cidr}: the GKE control plane "
            f"of {settings.cluster} accepts connections from the whole internet. "
            "Narrow it to your own network (e.g. 203.0.113.7/32).")


def settings_from_profile(profile: Profile, require_cidr: bool = True, **extra: Any) -> InfraSettings:
    """Read the infra knobs; ``extra`` supplies fields the profile does not carry (yet).

    Raises a user error when ``authorized_cidr`` is missing or malformed: nothing is created
    before the control plane's exposure has been decided on purpose.
    """
    gke = profile.gke
    if gke is None:
        raise user_error("infra settings need a GKE profile", f"backend {profile.backend}",
                         "use a profile with backend: gke")

    def pick(name: str) -> Any:
        return extra[name] if name in extra else getattr(gke, name)

    cidr = pick("authorized_cidr")
    if (require_cidr or cidr) and (problem := cidr_problem(cidr)):
        raise user_error(problem, f"profile {profile.name}", CIDR_FIX)
    return InfraSettings(
        project=gke.project, region=gke.region, zone=gke.zone, cluster=gke.cluster,
        bucket=gke.bucket, reservation=gke.reservation, machine_type=gke.machine_type,
        topology=gke.topology, nodepool_count=gke.nodepool_count,
        cluster_toolkit_version=gke.cluster_toolkit_version, authorized_cidr=cidr.strip() if cidr else None,
        iam_mode=pick("iam_mode"),
        cluster_toolkit_sha256=pick("cluster_toolkit_sha256"),
        usd_per_chip_hour=pick("usd_per_chip_hour"),
        cache_dir=Path(extra.get("cache_dir") or default_cache_dir()),
        releases_url=extra.get("releases_url") or os.environ.get("TPURL_GCLUSTER_RELEASES_URL")
        or RELEASES_URL)
