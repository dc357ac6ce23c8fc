"""What the job renderers need beyond the profile: constants that are not profile fields.

Every configurable knob (namespace, CPU pool, conversion placement and size, TTLs, restarts,
the Pathways tag) is a field of the profile's gke section (flows/config/gke.py, ``GkeJobs``
and ``GkeCluster``) and is read from ``profile.gke`` directly; ``GkeOptions`` holds a
reference to that section, never a copy, plus the fixed values below, the owner of the
run's Secrets (the profile's team, else the profile: jobs/secret_objects.py) and the JobSets'
Kueue labels (the team's queue and priority: team_queues.py), both from the run's team and
origin (flows/core/team_origin.py), decided once for the run.
"""

from __future__ import annotations

from dataclasses import dataclass

from flows.backends.gke.jobs.secret_objects import owner_of
from flows.backends.gke.team_identity import team_account
from flows.backends.gke.team_queues import queue_labels
from flows.config.gke import GkeSection
from flows.config.gke_section import gke_section
from flows.config.profile import Profile
from flows.core.team_origin import TeamAndOrigin, outside_a_run

PATHWAYS_REPOSITORY = "us-docker.pkg.dev/cloud-tpu-v2-images/pathways"


@dataclass(frozen=True)
class GkeOptions:
    gke: GkeSection
    secret_owner: str  # team:NAME or profile:NAME (jobs/naming.py secret_name)
    queue_labels: dict[str, str]  # the JobSets' Kueue queue (and priority, for a team)
    service_account: str = "default"  # what the team's pods run as (team_identity.py)
    team: str | None = None  # whose TPU pools its TPU pods land on (capacity_pools.py)
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


def options_for(profile: Profile, team_origin: TeamAndOrigin | None = None) -> GkeOptions:
    """The options of a run of this team and origin (None: a plan's, outside any run)."""
    run = team_origin or outside_a_run(profile.name)
    gke = gke_section(profile)
    team = run.team.name if run.team else None
    return GkeOptions(gke, owner_of(profile.name, run.team),
                      queue_labels(run.team, gke.kueue_queue, run.by_deployment),
                      service_account=team_account(team), team=team)
