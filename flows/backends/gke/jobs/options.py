"""What the job renderers need beyond the profile: constants that are not profile fields.

Every configurable knob (namespace, CPU pool, conversion placement and size, TTLs, restarts,
the Pathways tag) is a field of the profile's gke section (flows/config/gke.py, ``GkeJobs``
and ``GkeCluster``) and is read from ``profile.gke`` directly; ``GkeOptions`` holds a
reference to that section, never a copy, plus the fixed values below, and the owner of
the run's Secrets (the profile's team, else the profile: jobs/secret_objects.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from flows.backends.gke.jobs.secret_objects import secret_owner
from flows.config.gke import GkeSection
from flows.config.gke_section import gke_section
from flows.config.profile import Profile

PATHWAYS_REPOSITORY = "us-docker.pkg.dev/cloud-tpu-v2-images/pathways"


@dataclass(frozen=True)
class GkeOptions:
    gke: GkeSection
    secret_owner: str  # team:NAME or profile:NAME (jobs/naming.py secret_name)
    scratch_dir: str = "/scratch"
    termination_grace_s: int = 30
    worker_backoff_limit: int = 32
    pathways_repository: str = PATHWAYS_REPOSITORY
    hf_token_key: str = "value"  # key inside the Secret

    @property
    def proxy_image(self) -> str:
        return _pinned(f"{self.pathways_repository}/proxy_server:{self.gke.pathways_tag}",
                       self.gke.pathways_proxy_digest)

    @property
    def server_image(self) -> str:
        return _pinned(f"{self.pathways_repository}/server:{self.gke.pathways_tag}",
                       self.gke.pathways_server_digest)


def _pinned(tagged: str, digest: str | None) -> str:
    """TAG@DIGEST when the profile pins the digest: the runtime pulls by digest, the tag
    stays for the reader."""
    return f"{tagged}@{digest}" if digest else tagged


def options_for(profile: Profile) -> GkeOptions:
    return GkeOptions(gke_section(profile), secret_owner(profile.name))
