"""Which Kueue queue and priority a run's JobSets carry: its team's, or today's for a profile
in no team. Names only; the objects are rendered by infra/team_kueue.py.

A team's runs go through its own LocalQueue (``team-NAME``) into its own ClusterQueue, so
Kueue counts each team's chips apart and lends one team's idle chips to the other (the
cohort). A profile in no team keeps ``gke.kueue_queue`` and no priority class: its JobSets
are exactly what they were before teams had queues.

Priority: a run a deployment started (its schedule, an automation, the announcement
dispatcher, the run form) is a scheduled retrain; a run started in-process (``tpurl run``)
is someone waiting at a terminal. Kueue orders a ClusterQueue's pending Workloads by
priority first (kueue v0.17.1 pkg/workload/ordering, used by pkg/cache/queue/
cluster_queue.go), and with ``withinClusterQueue: LowerPriority`` an interactive run may
preempt its team's scheduled one. The label is Kueue's own
(pkg/controller/constants/constants.go WorkloadPriorityClassLabel).
"""

from __future__ import annotations

from flows.config.teams import Team

TEAM_QUEUE_PREFIX = "team-"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
INTERACTIVE = "tpurl-interactive"
SCHEDULED = "tpurl-scheduled"
PRIORITY_VALUES = {INTERACTIVE: 1000, SCHEDULED: 100}
"""WorkloadPriorityClass values: only their order matters (interactive above scheduled)."""


def team_queue_name(team: str) -> str:
    """The team's LocalQueue and ClusterQueue name (one of each per team)."""
    return f"{TEAM_QUEUE_PREFIX}{team}"


def priority_class(scheduled: bool) -> str:
    return SCHEDULED if scheduled else INTERACTIVE


def queue_labels(team: Team | None, default_queue: str, scheduled: bool) -> dict[str, str]:
    """Pure: the Kueue labels of a JobSet: the team's queue and priority, or today's queue
    alone for a run in no team."""
    if team is None:
        return {"kueue.x-k8s.io/queue-name": default_queue}
    return {"kueue.x-k8s.io/queue-name": team_queue_name(team.name),
            PRIORITY_LABEL: priority_class(scheduled)}
