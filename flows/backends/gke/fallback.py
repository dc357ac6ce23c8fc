"""When a capacity mode cannot be had, train in the next one: the chain's steps, the codes
that mean "no capacity" and the record of each step's attempt (pure; the decision to fall
back is next_action.py's).

Kueue does not fall back between flavors on a stockout (kubernetes-sigs/kueue#2560): its
flavor fungibility (ClusterQueue ``flavorFungibility`` whenCanBorrow/whenCanPreempt, kueue
pkg/scheduler/flavorassigner/flavorassigner.go) only orders flavors by *quota* when the
Workload is admitted; once admitted to a flavor whose nodes never come, the Workload waits.
So the stage decides: a verdict that says "no capacity in this mode" (the autoscaler's
FailedScaleUp past the scheduling budget, flex-start's capacity wait past the queue budget,
queued provisioning's ProvisioningRequest failing or waiting past the queue budget) is
followed by the next mode of ``gke.capacity``, with the same run name, so train_rl resumes
from its newest checkpoint. The JobSet of the spent mode is deleted and seen gone before the
next is created: never two JobSets of one stage at once.

Every other verdict keeps its meaning (next_action.py): a preemption resubmits in the same
mode (the slice was there; it may come back), a program error fails the stage.

The whole chain shares one stage budget: a fallback is taken only while the stage has waited
less than ``Budgets.queue_s`` in all, so the worst case of a chain is bounded by the stage's
own queue budget, not by the sum of every mode's.
"""

from __future__ import annotations

from dataclasses import dataclass

from flows.common.failure_codes import Failure


def attempts_of(chain: tuple[str, ...], zones: tuple[str, ...], num_slices: int
                ) -> tuple[tuple[str, str], ...]:
    """The (mode, zone) steps of the fallback, in order; zone "" lets the autoscaler pick
    among the mode's pools of every zone.

    One slice: a mode is one step, and the cluster autoscaler brings the slice up in any zone
    of it (node-group back-off, then another group: fake in tests/fakes/kube_api/
    node_groups.py). Several slices (gke.num_slices > 1): each slice is its own pool and the
    autoscaler scales each pool on its own, so left alone it could bring slice 0 up in one
    zone and slice 1 in another. Multislice training runs its data-parallel collectives
    between slices over the data-center network (Cloud TPU "Multislice": slices talk over
    DCN, inside a slice over ICI), which within a zone is the fabric the slices are built
    for; across zones it is inter-zone traffic, slower and billed. And Pathways' workers
    must all come up before its head schedules (JobSet startupPolicy InOrder), so a slice
    stuck in a stocked-out zone holds the others, billed, for the whole wait. So every
    slice of a run is in one zone: each (mode, zone) is a step, the JobSet pins the zone
    (``topology.kubernetes.io/zone``), and a stockout of any slice moves the whole run to
    the next zone, then the next mode. A reservation is one static pool in gke.zone."""
    if num_slices <= 1 or len(zones) <= 1:
        return tuple((mode, "") for mode in chain)
    return tuple(step for mode in chain for step in (
        [(mode, "")] if mode == "reservation" else [(mode, zone) for zone in zones]))


# Diagnosis codes that mean "this mode has no capacity now" (watch/verdict.py, watch/queued.py)
NO_CAPACITY = Failure.GKE_NO_CAPACITY
NO_FLEX_CAPACITY = Failure.GKE_NO_FLEX_START_CAPACITY
NO_QUEUED_CAPACITY = Failure.GKE_NO_QUEUED_CAPACITY
NO_CAPACITY_CODES = frozenset({NO_CAPACITY, NO_FLEX_CAPACITY, NO_QUEUED_CAPACITY})


@dataclass(frozen=True)
class Attempt:
    """One mode's part of a stage: where it ran, how long it waited, what it held."""

    mode: str
    zone: str = ""  # where the slice came up ("" if it never did)
    waited_s: float = 0.0  # from submission to the slice's pods bound (or to giving up)
    held_s: float = 0.0  # the slice held by this attempt's pods
    chip_hours: float = 0.0
    usd: float = 0.0
    outcome: str = ""  # succeeded | no-capacity | preempted | failed

    def line(self) -> str:
        where = f" in {self.zone}" if self.zone else ""
        return (f"{self.mode}{where}: waited {self.waited_s:.0f} s, held the slice "
                f"{self.held_s:.0f} s ({self.chip_hours:.3f} chip-h, ${self.usd:.2f}), "
                f"{self.outcome}")
