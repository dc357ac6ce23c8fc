"""What a stage has spent on TPU time so far, charged as the watch goes, against the caps.

Why charged in the watch: the monitor already wakes every tick, so the caps are checked
without an API call of their own. Held, as in the plan (flows/config/spend.py
``stage_chips_held``): the whole static pool on a reservation from the watch's start. In a
mode that scales from zero GCP bills each TPU VM from its creation to its deletion, so the
run's TPU nodes are charged for their lifetimes, each at its pool's mode's price
(``charge_nodes``; the node watch and its record: watch/tpu_nodes.py, started by
watch/node_charges.py): the nodes of a JobSet deleted mid scale-up, and those the autoscaler
keeps after the pods end (unneeded time, then the delay after the cluster's last scale-up),
which the watch goes on charging after the stage until they are gone, for at most the tail
the plan counts. A chain that starts with a reservation charges its static pool as such and
its later steps' nodes at their own prices. The run's ledger remembers up to when each node
is paid, so stages and submissions that see the same node never charge it twice.

Until the node watch has listed the nodes (a cluster whose RBAC refuses it), the stage's
chips are charged while a pod that requests ``google.com/tpu`` is bound to a node, and a
fixed scale-down tail (SCALE_DOWN_TAIL_S, the bound) after such pods end, in ``pause``:
what follows describes that record. When the list comes late (the API failing at the
stage's start), those charges are given back for each node it shows, whose lifetime
charges the same time from the meter's start; a node gone before the list keeps them.

The watch's copies can miss when a slice came up: the ticks go on while a watch is dropped,
the API answers 5xx or the pod watch lags, so pods first seen bound (or already ended) were
bound some time before. A pod carries that record (PodScheduled's lastTransitionTime from the
binding; each container's state.terminated.finishedAt from the kubelet, whole seconds), so
when no pod of the submission was seen holding yet, the slice is charged from it: from the
earliest binding to now, or to the latest end, once, and the scale-down tail after it as for
a slice seen. A slice whose pods were also deleted between two looks (the JobSet controller
deletes a finished JobSet's active Jobs, and their kubelets the pods, within a second) is
charged the same way from the last version the watch delivered of each (``BoundPods``: the
stream delivers every version, the DELETED one too), ended at its containers' finishedAt or,
without one, at its deletionTimestamp. Only a slice bound and deleted while the pod watch
itself was away (a relist lists the living) leaves no record here.

The run's total lives in a ledger keyed by the run (the Prefect flow run id, or one per
process outside a flow): stages run one after another in the flow's process, so the cap per
run is the sum over its stages and over resubmissions and Prefect retries of each. The clock is
a parameter, so a test moves time itself.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from flows.backends.gke.watch.api_time import api_time
from flows.backends.gke.watch.tpu_nodes import TpuNodes
from flows.common.api_objects import Obj, condition
from flows.common.failure_codes import Failure
from flows.config.capacity import SCALE_FROM_ZERO
from flows.config.gke_section import gke_section
from flows.config.profile import Profile
from flows.config.spend import SCALE_DOWN_TAIL_S, stage_chips_held
from flows.core.continuation import lower_work_fix
from flows.core.failures import Diagnosis, FailureCategory
from flows.core.team_budget import STOPPED, Allowance, add_stage_spend, allowance_for, recheck

_LEDGER: dict[str, float] = {}
_PAID_UNTIL: dict[str, float] = {}  # run → clock time up to which its TPU nodes are charged
# run → node → wall time up to which that node is charged (node lifetimes, tpu_nodes.py)
_NODE_PAID: dict[str, dict[str, float]] = {}
_LOCK = threading.Lock()
TPU_RESOURCE = "google.com/tpu"


def run_key() -> str:
    """The flow run this stage belongs to ("" outside a flow: one ledger per process)."""
    try:
        from prefect.runtime import flow_run

        return str(flow_run.id or "")
    except Exception:
        return ""


def spent_in_run(key: str) -> float:
    with _LOCK:
        return _LEDGER.get(key, 0.0)


def requests_tpu(pod: Obj) -> bool:
    """A container asks for TPU chips (limits; requests default to them for an extended
    resource): only such a pod brings a TPU node up."""
    for container in (pod.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        if any(TPU_RESOURCE in (resources.get(k) or {}) for k in ("limits", "requests")):
            return True
    return False


def _bound_tpu(pod: Obj) -> bool:
    return requests_tpu(pod) and bool((pod.get("spec") or {}).get("nodeName"))


def _ended(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def _node_of(pod: Obj) -> str:
    return str((pod.get("spec") or {}).get("nodeName"))


def _uid(pod: Obj) -> str:
    meta = pod.get("metadata") or {}
    return str(meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}")


def holds_tpu(pods: list[Obj]) -> bool:
    """A TPU pod is bound to a node and has not ended: the slice's nodes exist."""
    return any(_bound_tpu(p) and not _ended(p) for p in pods)



def _bound_at(pod: Obj) -> float | None:
    return api_time((condition(pod, "PodScheduled") or {}).get("lastTransitionTime"))


def _finished_at(pod: Obj) -> float | None:
    ends = [api_time(((c.get("state") or {}).get("terminated") or {}).get("finishedAt"))
            for c in (pod.get("status") or {}).get("containerStatuses") or []]
    return None if not ends or None in ends else max(e for e in ends if e is not None)


def _end_of(pod: Obj, wall_now: float, gone: bool) -> float | None:
    """When a pod stopped holding its node by its record: now while it runs; its containers'
    last finishedAt once ended; a deleted one without it, its deletionTimestamp (the end of
    its grace period, when the kubelet kills what is left: kubernetes apiserver
    pkg/registry/rest/delete.go BeforeDelete), never later than now."""
    if not gone and not _ended(pod):
        return wall_now
    if (finished := _finished_at(pod)) is not None or not gone:
        return finished
    deleting = api_time((pod.get("metadata") or {}).get("deletionTimestamp"))
    return None if deleting is None else min(deleting, wall_now)


def held_by_record(pods: list[Obj], wall_now: float,
                   gone: frozenset[str] = frozenset()) -> tuple[float, float] | None:
    """When the given TPU pods held their nodes by their own record, as Unix times: from the
    earliest binding (PodScheduled=True) to the latest end (``_end_of``; the pods whose uid is
    in ``gone`` were deleted), or to now while one runs; None when the record is incomplete
    (nothing is guessed)."""
    bound = [_bound_at(p) for p in pods]
    ends = [_end_of(p, wall_now, _uid(p) in gone) for p in pods]
    if not pods or None in bound or None in ends:
        return None
    return min(b for b in bound if b is not None), max(e for e in ends if e is not None)


class BoundPods:
    """The last version the pod watch delivered of each TPU pod it saw bound in one
    submission, kept after the pod is deleted: a slice bound, ended and deleted between two
    looks has its record only here. Fed from the watch's thread, read from the monitor's."""

    def __init__(self) -> None:
        self._pods: dict[str, Obj] = {}
        self._lock = threading.Lock()

    def note(self, pod: Obj) -> None:
        if _bound_tpu(pod):
            with self._lock:
                self._pods[_uid(pod)] = pod

    def gone(self, present: list[Obj]) -> list[Obj]:
        """Those seen bound that ``present`` (the pods as the API has them) no longer has."""
        here = {_uid(p) for p in present}
        with self._lock:
            return [p for uid, p in self._pods.items() if uid not in here]


# what a stop says about training less when the profile is not at hand; meter_for gives
# the run's own (flows/core/continuation.py lower_work_fix: its schedule named)
LOWER_WORK = ("or lower the work: set train.args.num_batches to the steps you want (at least the "
              "newest saved step) and keep the run's train.args.learning_rate_schedule_steps; "
              "the next run continues this one from its newest checkpoint")


@dataclass(frozen=True)
class Provisional:
    """A charge by the pods' record made before the node watch listed: up to ``end`` (the
    meter's clock), for the slice on ``nodes``."""

    end: float
    nodes: frozenset[str]
    usd: float


@dataclass
class SpendMeter:
    """One stage of one run: charges held chip-hours × price; ``charge`` says when a cap is
    crossed. Shared by every JobSet submission of the stage."""

    stage: str
    chips: int
    usd_per_chip_hour: float
    static_pool: bool
    run_cap: float | None
    stage_cap: float | None
    key: str = ""
    clock: Callable[[], float] = time.monotonic
    tail_s: float = 0.0  # billed after the TPU pods end (from zero: SCALE_DOWN_TAIL_S)
    wall: Callable[[], float] = time.time  # the pods' record is in the API's wall-clock time
    spent_usd: float = 0.0
    # the run's TPU nodes (tpu_nodes.py), once a node watch feeds them: their lifetimes are
    # what is charged for the pools that scale from zero, each node at its mode's price
    nodes: TpuNodes | None = field(default=None, repr=False)
    chips_per_node: int = 0
    node_prices: dict[str, float] = field(default_factory=dict)
    _since_wall: float = field(default=0.0, repr=False)  # nodes are charged from here on
    _last: float | None = field(default=None, repr=False)
    _held: bool = field(default=False, repr=False)  # TPU pods held nodes since the last pause
    _seen: set[str] = field(default_factory=set, repr=False)  # TPU pods charged or seen bound
    # the nodes this submission's TPU pods were seen bound to
    _pod_nodes: set[str] = field(default_factory=set, repr=False)
    # what the pods' record charged while the node watch had not listed yet: a node's
    # lifetime covers that time from the meter's start, so its share is given back once the
    # watch has listed and seen the node (one it never saw keeps the pods' charge)
    _provisional: list[Provisional] = field(default_factory=list, repr=False)
    # what the runs of its team ahead of this one left of the month (team_budget.py), read
    # again at most every RECHECK_S: the run stops once its own spend reaches it; None: the
    # profile is in no team
    team: Allowance | None = None
    lower_work: str = LOWER_WORK  # a stop's fix for training less (continuation.py)

    @property
    def charged_at(self) -> float | None:
        """The clock time of the last charge (None between submissions)."""
        return self._last

    @property
    def by_nodes(self) -> bool:
        """The node watch has listed the run's TPU nodes: their lifetimes are charged, not
        the pods' (a cluster whose RBAC refuses the node list leaves the pods' record)."""
        return self.nodes is not None and self.nodes.synced

    def attach_nodes(self, nodes: TpuNodes, chips_per_node: int,
                     node_prices: dict[str, float]) -> None:
        """Charge the pools that scale from zero by ``nodes``' lifetimes from now on."""
        self.nodes, self.chips_per_node = nodes, chips_per_node
        self.node_prices, self._since_wall = dict(node_prices), self.wall()

    def charge_nodes(self) -> Diagnosis | None:
        """Charge every run node up to now (or its end), less what the run already paid for
        it: the node watch calls this on every change, the monitor on every tick, a stage's
        watch after its end, each charging each node-second once."""
        if not self.by_nodes:
            return None
        assert self.nodes is not None
        now, lives = self.wall(), self.nodes.lifetimes()
        with _LOCK:
            if self._provisional:
                self._give_back({life.name for life in lives})
            paid = _NODE_PAID.setdefault(self.key, {})
            for life in lives:
                start = max(life.created, self._since_wall, paid.get(life.name, life.created))
                end = now if life.gone is None else life.gone
                if end <= start:
                    continue
                price = self.node_prices.get(life.mode, self.usd_per_chip_hour)
                self._book(self.chips_per_node * (end - start) / 3600.0 * price)
                paid[life.name] = end
        return self.crossed()

    @property
    def slice_unseen(self) -> bool:
        """From zero, no TPU pod seen holding since the last pause: what the slice cost, if
        it came up at all, is still to be read from its pods' record (not with the nodes')."""
        return not self.static_pool and not self._held and not self.by_nodes

    @property
    def run_spent_usd(self) -> float:
        return spent_in_run(self.key)

    def charge(self, pods: list[Obj], gone: list[Obj] | None = None) -> Diagnosis | None:
        """Add the time since the last call at the chips held now; a diagnosis once a cap is
        crossed (the caller deletes the JobSet). ``gone``: TPU pods once seen bound that the
        API no longer has (``BoundPods.gone``), in their last version."""
        now = self.clock()
        if self.by_nodes:
            self.charge_nodes()
            if not self.static_pool:  # a chain's reservation is charged as its static pool
                self._last = now
                return self.crossed()
        held = self.static_pool or holds_tpu(pods)
        if not self.static_pool:
            self._pod_nodes.update(_node_of(p) for p in [*pods, *(gone or [])] if _bound_tpu(p))
            self._charge_unseen(pods, gone or [], now)
        if self._last is not None and held:
            self._add(self._last, now)
        self._held = self._held or held
        self._last = now
        return self.crossed()

    def _charge_unseen(self, pods: list[Obj], gone: list[Obj], now: float) -> None:
        """TPU pods first seen bound, with none seen holding since the last pause: the slice
        may have come up (and even ended, or gone) between two looks, so what the looks
        missed is charged from the pods' record, placed on the meter's clock: up to the
        previous look while they run (the tick charges from there), up to their end once
        ended or deleted."""
        gone_uids = frozenset(_uid(p) for p in gone)
        new = [p for p in [*pods, *gone] if _bound_tpu(p) and _uid(p) not in self._seen]
        self._seen.update(_uid(p) for p in new)
        if not new or self._held:  # the slice was seen: its ticks charge it
            return
        wall_now = self.wall()
        if (span := held_by_record(new, wall_now, gone_uids)) is None:
            return
        # the record is in whole seconds: a binding at t happened in [t, t + 1), so t + 1
        # never charges a second the slice did not hold (nor does an end read as t)
        start, end = (now - max(0.0, wall_now - t) for t in (span[0] + 1.0, span[1]))
        if holds_tpu([p for p in new if _uid(p) not in gone_uids]):  # the tick charges on
            end = min(end, self._last) if self._last is not None else start
        if end > start:
            self._add(start, end)
            self._held = True  # its nodes' scale-down tail is billed after it

    def _add(self, start: float, end: float) -> None:
        """Charge [start, end), less what the run already paid (a scale-down tail). From
        zero, with a node watch attached that has not listed yet (the API failing at the
        stage's start), the charge keeps the caps honest meanwhile and is provisional: the
        nodes' lifetimes charge the same time once listed."""
        with _LOCK:
            start = start if self.static_pool else max(start, _PAID_UNTIL.get(self.key, start))
            usd = self.chips * max(end - start, 0.0) / 3600.0 * self.usd_per_chip_hour
            self._book(usd)
            if not self.static_pool:
                _PAID_UNTIL[self.key] = max(_PAID_UNTIL.get(self.key, end), end)
                if self.nodes is not None:  # TPU pods held: their nodes are known
                    self._provisional.append(Provisional(end, frozenset(self._pod_nodes), usd))

    def _give_back(self, seen: set[str]) -> None:
        """Settle the provisional charges once the watch has listed: each one's share of
        the nodes it has ``seen`` is given back (their lifetimes charge the same time), the
        share of those it never saw stays charged; the caller holds ``_LOCK``. A guessed
        tail given back no longer counts as paid for."""
        kept_until = self.clock()
        for charge in self._provisional:
            unseen = charge.nodes - seen
            self._book(-charge.usd * (1 - len(unseen) / len(charge.nodes)))
            if unseen:
                kept_until = max(kept_until, charge.end)
        self._provisional = []
        if self.key in _PAID_UNTIL:
            _PAID_UNTIL[self.key] = min(_PAID_UNTIL[self.key], kept_until)

    def _book(self, usd: float) -> None:
        """Add ``usd`` (negative: given back) to the stage, its run's ledger and its team's
        record of the stage; the caller holds ``_LOCK``."""
        self.spent_usd += usd
        _LEDGER[self.key] = _LEDGER.get(self.key, 0.0) + usd
        add_stage_spend(self.key, self.stage, usd)

    def pause(self) -> Diagnosis | None:
        """A submission's watch ended (the stage's end, or before a resubmission). From zero:
        if TPU pods held nodes, those nodes stay billed until the autoscaler removes them, so
        that tail is charged now, and the next charge starts afresh (nothing is watched in
        between); a static pool is billed meanwhile anyway, so its clock keeps running."""
        if self.static_pool:
            return None
        if self.by_nodes:  # the nodes are charged while they live, not by a guessed tail
            self._last, self._held = None, False
            return self.charge_nodes()
        if self._held and self._last is not None:
            self._add(self._last, self._last + self.tail_s)
        self._last, self._held, self._pod_nodes = None, False, set()
        return self.crossed()

    def crossed(self) -> Diagnosis | None:
        run = self.run_spent_usd
        if self.stage_cap is not None and self.spent_usd >= self.stage_cap:
            return budget_diagnosis(self.stage, self.spent_usd, self.stage_cap,
                                    f"gke.max_usd_per_stage.{self.stage}", run, self.lower_work)
        if self.run_cap is not None and run >= self.run_cap:
            return budget_diagnosis(self.stage, run, self.run_cap, "gke.max_usd_per_run", run,
                                    self.lower_work)
        if self.team is not None:
            self.team = recheck(self.key, self.clock()) or self.team
            if run >= self.team.left_usd:
                return team_diagnosis(self.stage, run, self.team, self.lower_work)
        return None


def meter_for(profile: Profile, stage: str, clock: Callable[[], float] = time.monotonic,
              key: str | None = None) -> SpendMeter | None:
    """The stage's meter, or None when the profile sets no cap and its run was granted no
    team allowance (nothing to enforce)."""
    gke = profile.gke
    key = run_key() if key is None else key
    team = allowance_for(key)
    if gke is None or (gke.max_usd_per_run is None and stage not in gke.max_usd_per_stage
                       and team is None):
        return None
    prices = node_prices(profile)
    return SpendMeter(stage, stage_chips_held(gke, stage), gke.usd_per_chip_hour,
                      not gke.scales_from_zero, gke.max_usd_per_run,
                      # any stage's name: the caps are keyed by the TPU stages' only
                      gke.max_usd_per_stage.get(stage),  # type: ignore[call-overload]
                      key, clock, SCALE_DOWN_TAIL_S if prices else 0.0, node_prices=prices,
                      team=team, lower_work=lower_work_fix(profile.train.args))


def node_prices(profile: Profile) -> dict[str, float]:
    """Each mode of the chain that scales from zero at its own price: a node is charged at
    its pool's mode (its ``tpurl/capacity`` label), whichever step of the chain runs."""
    gke = gke_section(profile)
    return {mode: gke.mode_usd_per_chip_hour(mode) for mode in gke.capacity_chain
            if mode in SCALE_FROM_ZERO}


def budget_diagnosis(stage: str, spent: float, cap: float, field_name: str,
                     run_spent: float, lower_work: str = LOWER_WORK) -> Diagnosis:
    summary = (f"stage {stage} stopped: ${spent:,.2f} of TPU time spent, cap {field_name} "
               f"${cap:,.2f}")
    return Diagnosis(
        FailureCategory.BUDGET, summary,
        f"    spent in this run so far: ${run_spent:,.2f} (held chip-hours × the capacity "
        "mode's price, as the watch saw them)",
        f"the JobSet was deleted so nothing holds the slice; checkpoints already written are "
        f"kept and the next run resumes from the newest. Raise {field_name} if the run just "
        f"needs longer, {lower_work}", code=Failure.GKE_SPEND_CAP)


def team_diagnosis(stage: str, run_spent: float, team: Allowance,
                   lower_work: str = LOWER_WORK) -> Diagnosis:
    """The run spent what the runs of its team ahead of it left of the month."""
    return Diagnosis(
        FailureCategory.BUDGET, f"stage {stage} stopped: this run spent ${run_spent:,.2f} of "
        f"TPU time, all that team {team.team}'s runs ahead of it left of {team.month} "
        f"(${team.left_usd:,.2f})",
        "    the team's month is in the spend ledger: tpurl costs " + team.team,
        f"the JobSet was deleted so nothing holds the slice; checkpoints already written are "
        f"kept and the next run resumes from the newest. Raise teams.{team.team}.usd_per_month "
        f"in the teams file (deployments/teams.yaml), or wait for the next month (UTC), "
        f"{lower_work}", code=STOPPED)
