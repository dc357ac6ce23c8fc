"""How long a GKE stage's task may run (the Timing part of the Backend protocol): the
budget arithmetic is flows/core/budgets.py's; this backend adds only its own fact, how many
JobSets each stage submits one after the other (none for image and infra)."""

from __future__ import annotations

from flows.backends.gke.jobs.manifests import GKE_STAGES, jobs_of
from flows.config.profile import Profile
from flows.core.budgets import gke_stage_timeout_s


def stage_timeout_s(profile: Profile, stage: str) -> float:
    jobsets = len(jobs_of(stage)) if stage in GKE_STAGES else 0
    return gke_stage_timeout_s(profile, stage, jobsets)
