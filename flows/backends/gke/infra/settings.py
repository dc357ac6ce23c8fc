"""The infra stage's runtime settings: the profile's gke section plus what is not a profile field.

The profile is the single source of every GKE setting (flows/config/gke.py): this value holds
a reference to ``profile.gke``, never a copy of its fields, and adds only what the machine
decides (the cache folder from the environment, a Cluster Toolkit releases mirror) and the
paths derived from them. Infra code reads ``s.gke.<field>`` and the section's derived values
(``total_chips``, ``hosts_needed``, service accounts, ``idle_usd_per_hour``), and the
LocalQueue the profile's JobSets name: its team's (deployments/teams.yaml) or
``gke.kueue_queue``, the one pre-flight must find.
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from flows.backends.gke.infra.team_quota import checked_quotas
from flows.backends.gke.team_queues import team_queue_name
from flows.common.paths import default_cache_dir
from flows.config.gke import GkeCluster, GkeSection
from flows.config.profile import Profile
from flows.config.teams import load_teams
from flows.core.failures import user_error

RELEASES_URL = "https://github.com/GoogleCloudPlatform/cluster-toolkit/releases/download"
BUNDLE_NAME = "gcluster_bundle_linux_amd64.tgz"
# Every generation's cluster is this example edited (deployments/blueprints/
# tpu-cluster.edits.yaml; the machine type and accelerator label are deploy vars), written
# under the example's own name, which the tutorial deploys: the name says where it came from.
BLUEPRINT_EXAMPLE = "examples/gke-tpu-v6e/gke-tpu-v6e-advanced.yaml"
BLUEPRINT_FILE = "gke-tpu-v6e-advanced.yaml"


class InfraSettings(BaseModel):
    model_config = ConfigDict(frozen=True)

    gke: GkeSection
    cache_dir: Path
    releases_url: str = RELEASES_URL
    team_queue: str | None = None
    """The team's LocalQueue (None: the profile is in no team)."""
    team: str | None = None
    """The profile's team (None: in no team): whose identity its pods run as."""
    project_number: str | None = None
    """The project's number, once read (the team principal names it; the plan cannot)."""

    @property
    def team_member(self) -> str:
        """The IAM member the profile's pods act as (team_identity.py)."""
        from flows.backends.gke.team_identity import principal, team_account

        return principal(self.gke.project, self.gke.namespace, team_account(self.team),
                         self.project_number)

    @property
    def queue(self) -> str:
        """The LocalQueue the profile's JobSets are labelled with (jobs/common.py)."""
        return self.team_queue or self.gke.kueue_queue

    @property
    def state_prefix(self) -> str:
        """Where the deployment folder lives between runs (object name prefix in the bucket)."""
        return f"tpurl/gcluster/{self.gke.cluster}/"

    @property
    def workdir(self) -> Path:
        """gcluster runs here; the deployment folder is ``workdir / cluster``."""
        return self.cache_dir / "gcluster" / self.gke.project / self.gke.cluster

    @property
    def deployment_dir(self) -> Path:
        return self.workdir / self.gke.cluster

    @property
    def bundle_url(self) -> str:
        return f"{self.releases_url}/{self.gke.cluster_toolkit_version}/{BUNDLE_NAME}"


def world_open_warning(gke: GkeCluster) -> str | None:
    if not gke.open_to_world:
        return None
    return (f"WARNING: gke.authorized_cidr is {gke.authorized_cidr}: the GKE control plane "
            f"of {gke.cluster} accepts connections from the whole internet. "
            "Narrow it to your own network (e.g. 203.0.113.7/32).")


def settings_from_profile(profile: Profile, *, cache_dir: Path | None = None,
                          releases_url: str | None = None) -> InfraSettings:
    """The runtime settings of a GKE profile; the CIDR was validated with the profile."""
    if profile.gke is None:
        raise user_error("infra", "infra settings need a GKE profile", f"backend {profile.backend}",
                         "use a profile with backend: gke")
    teams = load_teams()
    team = teams.team_of(profile.name)
    if team is not None:  # a split the cluster cannot hold, or a run its team never could
        checked_quotas(teams, profile.gke.total_chips, {profile.name: profile.gke.total_chips})
    return InfraSettings(
        gke=profile.gke, cache_dir=cache_dir or default_cache_dir(),
        team_queue=team_queue_name(team.name) if team else None,
        team=team.name if team else None,
        releases_url=releases_url or os.environ.get("TPURL_GCLUSTER_RELEASES_URL")
        or RELEASES_URL)
