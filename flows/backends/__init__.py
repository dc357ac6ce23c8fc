"""Backends: the one object through which a stage touches the world (flows/core/backend.py).

``backend_for`` is the only place that chooses one; a third backend is a folder here plus a
line below. Imports are deferred so a rehearsal never loads the Kubernetes or GCS clients.
A stage's time bound is asked of the backend through the protocol (``Timing``), whose answer
flows/core/budgets.py computes.
"""

from __future__ import annotations

import sys

from flows.common.failure_codes import Failure
from flows.common.issues import Issue
from flows.config.errors import EnvironmentNotReady
from flows.config.profile import Profile
from flows.core.backend import Backend, ProgressCallback, StageLogger
from flows.core.secrets import Redactor
from flows.core.storage import LocalStorage, Storage
from flows.core.team_origin import TeamAndOrigin


def backend_for(profile: Profile, *, logger: StageLogger | None = None,
                redactor: Redactor | None = None, on_progress: ProgressCallback | None = None,
                stage: str = "", team_origin: TeamAndOrigin | None = None) -> Backend:
    """The profile's backend: a run's one (each stage binds it, ``Backend.for_stage``), in
    a run of this team and origin (None: a plan's or a command's, outside any run), or a
    plan's (it does no I/O)."""
    if profile.backend == "gke":
        try:
            from flows.backends.gke.backend import GkeBackend
        except ModuleNotFoundError as missing:
            raise gcp_extra_missing(profile.name, missing) from None
        return GkeBackend(profile, logger=logger, redactor=redactor, on_progress=on_progress,
                          stage=stage, team_origin=team_origin)
    from flows.backends.local.backend import LocalBackend

    return LocalBackend(profile, logger=logger, redactor=redactor, on_progress=on_progress,
                        stage=stage)


def storage_for(uri: str) -> Storage:
    """The storage that reads ``uri``: GCS for gs://, the local disk for file:// (a team's
    ledger spans the roots of its profiles, on either)."""
    if uri.startswith("gs://"):
        from flows.backends.gke.gcs import GcsStorage

        return GcsStorage()
    return LocalStorage()


# the top-level modules of pyproject.toml's `gcp` extra, which `setup.sh --run` leaves out
GCP_EXTRA_MODULES = frozenset({"kubernetes", "google", "prefect_gcp", "prefect_kubernetes",
                               "docker", "prefect_docker"})


def gcp_extra_missing(profile: str, missing: ModuleNotFoundError) -> EnvironmentNotReady:
    """A GKE profile where the cloud libraries were not installed (a venv set up for the
    rehearsal): the one command that installs them, rather than the import's traceback. An
    import of anything else that fails is a bug of ours and propagates as it is."""
    top = (missing.name or "").split(".")[0]
    if top not in GCP_EXTRA_MODULES:
        raise missing
    return EnvironmentNotReady(profile, [Issue(
        "backend", f"a GKE profile needs the cloud libraries, and the Python package "
        f"`{missing.name}` is not installed in {sys.prefix}",
        "install them with `bash scripts/setup.sh --gke` (the project with its `gcp` extra; "
        "`bash scripts/setup.sh` installs them with the dev tools)",
        Failure.ENVIRONMENT_NO_GKE_LIBRARIES)])


def end_background_watches() -> int:
    """End what a backend keeps watching after its stages (a GKE stage's TPU nodes, charged
    until the autoscaler removes them) once the run is over, so each says what it saw and
    none polls the cluster for a run that has ended. Only a backend that was loaded can have
    any: a rehearsal never imports the Kubernetes client for this."""
    tails = sys.modules.get("flows.backends.gke.watch.tpu_nodes")
    return tails.end_tails() if tails is not None else 0
