"""Backends: the one object through which a stage touches the world (flows/core/backend.py).

``backend_for`` is the only place that chooses one; a third backend is a folder here plus a
line below. Imports are deferred so a rehearsal never loads the Kubernetes or GCS clients.
``stage_timeout_s`` and ``run_timeout_s`` are the flow's time bounds for a profile: each asks
the profile's backend through the protocol (``Timing``), whose answer flows/core/budgets.py
computes.
"""

from __future__ import annotations

from collections.abc import Iterable

from flows.config.profile import Profile
from flows.core.backend import Backend, ProgressCallback, StageLogger
from flows.core.budgets import run_bound_s
from flows.core.secrets import Redactor


def backend_for(profile: Profile, *, logger: StageLogger | None = None,
                redactor: Redactor | None = None, on_progress: ProgressCallback | None = None,
                stage: str = "") -> Backend:
    """The profile's backend for one stage (or for a plan, with no stage: it does no I/O)."""
    if profile.backend == "gke":
        from flows.backends.gke.backend import GkeBackend

        return GkeBackend(profile, logger=logger, redactor=redactor, on_progress=on_progress,
                          stage=stage)
    from flows.backends.local.backend import LocalBackend

    return LocalBackend(profile, logger=logger, redactor=redactor, on_progress=on_progress,
                        stage=stage)


def stage_timeout_s(profile: Profile, stage: str) -> float:
    """How long the task of ``stage`` may run before Prefect ends it."""
    return backend_for(profile).stage_timeout_s(stage)


def run_timeout_s(profile: Profile, stages: Iterable[str]) -> float:
    """The run's own bound (flows/core/deadline.py enforces it): flow_timeout_s, or every
    attempt of each of ``stages`` (flows/core/budgets.py ``run_bound_s``)."""
    backend = backend_for(profile)
    return run_bound_s(profile, [backend.stage_timeout_s(stage) for stage in stages])

