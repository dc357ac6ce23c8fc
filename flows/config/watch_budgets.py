"""The GKE watch's budgets that had no profile field: how long a stage waits on
the cluster before it gives up. A mixin of ``GkeSection`` (flows/config/gke.py), kept in its
own module so the cluster, capacity and job fields change without touching it.

The older budget fields (``queue_budget_s``, ``run_budget_s``, ``train_run_budget_s``,
``preemption_budget``) stay in ``GkeJobs``; their defaults live with every other time
budget (flows/core/budgets.py ``Budgets``, which reads the defaults below from here): 6 h
queued (quota frees up by itself and costs nothing while waiting), 24 h running (the TTL of
a Pathways job), 3 resubmissions after a preemption. The worst-case wait of each stage,
Prefect's retries included, is in the plan (flows/core/budgets.py ``stage_waits``).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from flows.config.errors import FixableValueError
from flows.config.types import Checked

WEEK_S = 7 * 24 * 3600.0


def _at_most_a_week(value: float) -> float:
    if value > WEEK_S:
        raise FixableValueError(
            f"{value:.0f} s is more than a week: a watch budget bounds how long a stage "
            "waits before it says why", f"give seconds, at most {WEEK_S:.0f}")
    return value


# seconds a stage waits for something before it says why; the fix text says a week is the most
Budget = Annotated[float, Checked(_at_most_a_week, maximum=int(WEEK_S))]


class GkeWatchBudgets(BaseModel):
    """Each default with its reason (configured like StrictModel in flows/config/section_base.py)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    # Pods admitted but unschedulable this long → infrastructure (retried). 30 min: a
    # scale-up of a whole slice takes minutes; longer means no capacity or a pool too small.
    # flex-start waits under the queue budget instead.
    schedule_budget_s: Budget = Field(1800.0, gt=0)
    """Seconds a pod may wait for a node before the stage fails."""
    # An infrastructure fault pulling the image (registry 5xx, reset) this long → infrastructure. 10 min
    # covers kubelet's pull back-off (10 s doubling to 5 min) for two or three attempts.
    pull_grace_s: Budget = Field(600.0, gt=0)
    """Seconds an image pull may take before it is a failure."""
    # One Kubernetes API call rides out 5xx/429/resets this long. 15 min: a GKE control
    # plane upgrade makes the API unavailable for a few minutes.
    api_budget_s: Budget = Field(900.0, gt=0)
    """Seconds the Kubernetes API may be unreachable before the stage fails."""
    # After a terminal verdict, wait this long for the terminated program's last log lines
    # (the traceback that names the cause); a program still running is not waited for.
    log_drain_s: Budget = Field(10.0, ge=0)
    """Seconds to read the last log lines after a JobSet ends."""
    # A Foreground delete must finish before the JobSet is created again. 5 min: the pods'
    # termination grace plus the garbage collector.
    delete_wait_s: Budget = Field(300.0, gt=0)
    """Seconds to wait for a deleted JobSet's pods to go."""
    # A program refused (GCS 403) a permission of a role the infra stage granted its account
    # is resubmitted until this long after the grant. 7 min: IAM policy changes "typically
    # propagate in 2 minutes, but could potentially take 7 minutes or longer" (Google's
    # access-change-propagation page; flows/backends/gke/iam_propagation.py).
    iam_propagation_s: Budget = Field(420.0, gt=0)
    """Seconds after tpurl's own grant that a 403 on it is waited out."""

