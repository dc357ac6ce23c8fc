"""How long one stage's task may run before Prefect ends it, from the profile's budgets.

Why: a program that hangs without failing (a stuck collective, a JobSet that never leaves
Running) would hold the run, the profile's lock and on GKE the TPUs forever. Each bound is
the most the stage's own watch allows, plus slack, so a timeout only ever ends a stage its
watch failed to end: on GKE ``(queue + run) × (preemptions + 1)`` of the stage's budgets
(flows/backends/gke/watch/budgets.py ``budgets_for``), on the rehearsal
``local.step_timeout_s`` per program. A timed-out task fails (TimeoutError) and is not
retried (flows/pipeline.py ``retry_if_retryable``).
"""

from __future__ import annotations

from flows.backends.gke.watch.budgets import budgets_for
from flows.config.profile import Profile

SLACK_S = 1800.0  # resubmission, log drain, verification and upload after the last program
LOCAL_PROGRAMS = 4  # the most programs one rehearsal stage runs in sequence
# Building the image (Cloud Build / docker) and `gcluster deploy` have no profile budget;
# the longest the tutorial reports for either is well under this.
UNBUDGETED_GKE_S = 4 * 3600.0


def stage_timeout_s(profile: Profile, stage: str) -> float:
    if profile.gke is None:
        assert profile.local is not None
        return LOCAL_PROGRAMS * profile.local.step_timeout_s + SLACK_S
    if stage not in ("convert", "train", "export"):
        return UNBUDGETED_GKE_S
    budgets = budgets_for(profile, stage)
    return (budgets.queue_s + budgets.run_s) * (budgets.preemptions + 1) + SLACK_S

