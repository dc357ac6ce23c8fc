"""The spend meter's decisions (flows/backends/gke/watch/spend.py), as pure calls with a clock
the test moves: which pods mean the TPU nodes exist, what an interval costs, when the
scale-down tail is paid and never twice, which cap stops the stage and what the user reads
then, and which meter a profile gets. No cluster: the pods are the dicts the API returns."""

from __future__ import annotations

import uuid

import pytest

from flows.backends.gke.watch.spend import (
    LOWER_WORK,
    SpendMeter,
    budget_diagnosis,
    holds_tpu,
    meter_for,
    requests_tpu,
    spent_in_run,
)
from flows.config.loading import load_profile
from flows.core.continuation import lower_work_fix
from flows.core.failures import Diagnosis, FailureCategory
from flows.core.team_budget import RECHECK_S, STOPPED, Allowance, grant, rechecked_by
from tests.support.fake_clock import Clock
from tests.support.profiles import QUOTED_PRICE, capacity_overrides, tutorial_profile

HOUR = 3600.0


def _pod(node: str = "tpu-node-0", phase: str | None = "Running", tpu_in: str = "limits",
         containers: list[dict] | None = None) -> dict:
    """A pod as the API returns it; by default a Pathways worker asking for 4 chips."""
    if containers is None:
        containers = [{"name": "pathways-worker",
                       "resources": {tpu_in: {"google.com/tpu": "4"}}}]
    return {"spec": {"nodeName": node, "containers": containers},
            "status": {} if phase is None else {"phase": phase}}


CPU_ONLY = [{"name": "pathways-rm", "resources": {"requests": {"cpu": "8"}}}]
HEAD = _pod("cpu-np-node-0", containers=CPU_ONLY)


def _meter(clock: Clock, *, static: bool = False, run_cap: float | None = None,
           stage_cap: float | None = None, key: str | None = None, chips: int = 8,
           usd: float = 1.0, tail_s: float = 0.0, stage: str = "train") -> SpendMeter:
    return SpendMeter(stage, chips, usd, static, run_cap, stage_cap,
                      key or uuid.uuid4().hex, clock, tail_s)


# --- which pods mean the TPU nodes exist ----------------------------------------------------
def test_a_pod_asks_for_tpu_chips_in_its_limits_or_its_requests() -> None:
    assert requests_tpu(_pod(tpu_in="limits")) and requests_tpu(_pod(tpu_in="requests"))
    assert not requests_tpu(HEAD)
    assert not requests_tpu({})  # no spec yet
    assert not requests_tpu({"spec": {"containers": [{"name": "x", "resources": None}]}})
    assert not requests_tpu({"spec": {"containers": [
        {"name": "x", "resources": {"limits": None, "requests": None}}]}})


def test_any_container_of_the_pod_may_be_the_one_asking() -> None:
    sidecar_first = [*CPU_ONLY, {"name": "w", "resources": {"limits": {"google.com/tpu": "4"}}}]
    assert requests_tpu(_pod(containers=sidecar_first))


def test_the_nodes_exist_while_a_tpu_pod_is_bound_and_has_not_ended() -> None:
    assert holds_tpu([_pod(phase="Running")])
    assert holds_tpu([_pod(phase="Pending")])  # bound, pulling its image on the TPU node
    assert holds_tpu([_pod(phase=None)])  # bound, no phase posted yet
    assert not holds_tpu([_pod(phase="Succeeded")]) and not holds_tpu([_pod(phase="Failed")])
    assert not holds_tpu([_pod(node="", phase="Pending")])  # waiting for the scale-up
    assert not holds_tpu([{"spec": {"containers": _pod()["spec"]["containers"]}}])  # no node
    assert not holds_tpu([HEAD])  # the head on cpu-np is not a TPU node
    assert not holds_tpu([])
    assert holds_tpu([HEAD, _pod(phase="Succeeded"), _pod(phase="Running")])  # any one


# --- what an interval costs -----------------------------------------------------------------
def test_the_first_tick_starts_the_clock_and_charges_nothing() -> None:
    clock = Clock()
    clock.now = 5 * HOUR
    meter = _meter(clock, static=True)
    assert meter.charged_at is None
    assert meter.charge([]) is None and meter.spent_usd == 0.0
    assert meter.charged_at == 5 * HOUR


def test_an_interval_costs_chips_times_hours_times_the_price() -> None:
    clock, key = Clock(), uuid.uuid4().hex
    meter = _meter(clock, chips=32, usd=2.7, key=key)
    meter.charge([_pod()])
    clock.now = 1800.0
    meter.charge([_pod()])
    assert meter.spent_usd == pytest.approx(32 * 0.5 * 2.7)
    assert meter.run_spent_usd == spent_in_run(key) == pytest.approx(43.2)
    assert meter.charged_at == 1800.0


def test_from_zero_an_interval_is_charged_only_when_a_tpu_pod_holds_a_node_at_its_end() -> None:
    clock = Clock()
    meter = _meter(clock)
    meter.charge([HEAD])
    clock.now = HOUR
    meter.charge([HEAD, _pod(node="")])  # scale-up: no TPU node yet, nothing billed
    assert meter.spent_usd == 0.0 and meter.charged_at == HOUR
    clock.now = 2 * HOUR
    meter.charge([HEAD, _pod()])
    assert meter.spent_usd == pytest.approx(8.0)
    clock.now = 3 * HOUR
    meter.charge([_pod(phase="Succeeded")])  # ended: the nodes are the tail's now
    assert meter.spent_usd == pytest.approx(8.0)


def test_a_static_pool_is_charged_with_no_pod_at_all() -> None:
    clock = Clock()
    meter = _meter(clock, static=True)
    meter.charge([])
    clock.now = HOUR
    meter.charge([])
    assert meter.spent_usd == pytest.approx(8.0)


def test_runs_have_separate_ledgers_and_stages_of_one_run_share_one() -> None:
    clock, run, other = Clock(), uuid.uuid4().hex, uuid.uuid4().hex
    convert = _meter(clock, static=True, key=run, stage="convert")
    train = _meter(clock, static=True, key=run)
    elsewhere = _meter(clock, static=True, key=other)
    for meter in (convert, train, elsewhere):
        meter.charge([])
    clock.now = HOUR
    for meter in (convert, train, elsewhere):
        meter.charge([])
    assert convert.spent_usd == train.spent_usd == pytest.approx(8.0)  # each its own stage
    assert spent_in_run(run) == pytest.approx(16.0) and spent_in_run(other) == pytest.approx(8.0)
    assert spent_in_run(uuid.uuid4().hex) == 0.0


# --- the scale-down tail ----------------------------------------------------------------------
def test_the_tail_is_charged_at_pause_and_the_next_watch_starts_afresh() -> None:
    clock = Clock()
    meter = _meter(clock, tail_s=600.0)
    meter.charge([_pod()])
    clock.now = HOUR
    meter.charge([_pod()])
    assert meter.pause() is None
    assert meter.spent_usd == pytest.approx(8.0 + 8 * 600 / HOUR)
    assert meter.charged_at is None  # nothing is watched between submissions
    clock.now = 5 * HOUR  # resubmitted long after: the hours in between were not watched
    meter.charge([_pod()])
    assert meter.spent_usd == pytest.approx(8.0 + 8 * 600 / HOUR)
    clock.now = 6 * HOUR
    meter.charge([_pod()])
    assert meter.spent_usd == pytest.approx(16.0 + 8 * 600 / HOUR)


def test_no_tail_when_no_tpu_pod_held_nodes_or_nothing_was_watched() -> None:
    clock = Clock()
    meter = _meter(clock, tail_s=600.0)
    assert meter.pause() is None and meter.spent_usd == 0.0  # never charged
    meter.charge([HEAD])
    clock.now = HOUR
    meter.charge([HEAD])
    meter.pause()
    assert meter.spent_usd == 0.0  # the head alone brought no TPU node up


def test_a_tpu_pod_seen_at_any_tick_since_the_last_pause_earns_the_tail() -> None:
    clock = Clock()
    meter = _meter(clock, tail_s=600.0)
    meter.charge([_pod()])  # held at the first tick only: nothing to charge yet
    clock.now = 60.0
    meter.charge([_pod(phase="Succeeded")])
    meter.pause()
    assert meter.spent_usd == pytest.approx(8 * 600 / HOUR)
    meter.pause()  # nothing held since the last pause: no second tail
    assert meter.spent_usd == pytest.approx(8 * 600 / HOUR)


def test_a_resubmission_within_the_tail_is_charged_from_the_tails_end_only() -> None:
    clock, key = Clock(), uuid.uuid4().hex
    first = _meter(clock, key=key, tail_s=600.0)
    first.charge([_pod()])
    clock.now = HOUR
    first.charge([_pod()])
    first.pause()  # paid until 1 h 10 min
    second = _meter(clock, key=key, tail_s=600.0, stage="evaluate")  # the next stage
    clock.now = HOUR + 120.0
    second.charge([_pod()])
    clock.now = HOUR + 300.0  # still inside the paid tail: nothing more, never negative
    second.charge([_pod()])
    assert second.spent_usd == 0.0
    clock.now = HOUR + 900.0  # 5 min past the tail's end
    second.charge([_pod()])
    assert second.spent_usd == pytest.approx(8 * 300 / HOUR)
    assert spent_in_run(key) == pytest.approx(8.0 + 8 * 600 / HOUR + 8 * 300 / HOUR)


def test_a_later_paid_until_is_not_moved_back_by_an_earlier_interval() -> None:
    clock, key = Clock(), uuid.uuid4().hex
    first = _meter(clock, key=key, tail_s=HOUR)
    first.charge([_pod()])
    clock.now = 60.0
    first.charge([_pod()])
    first.pause()  # paid until 1 h 1 min
    other = _meter(clock, key=key)
    other.charge([_pod()])
    clock.now = 120.0
    other.charge([_pod()])  # inside the paid hour: free, and the paid mark stays at 1 h 1 min
    assert other.spent_usd == 0.0
    clock.now = HOUR
    other.charge([_pod()])
    assert other.spent_usd == 0.0
    clock.now = HOUR + 60.0 + 360.0
    other.charge([_pod()])
    assert other.spent_usd == pytest.approx(8 * 360 / HOUR)


def test_a_static_pool_ignores_the_paid_tail_and_bills_on_between_submissions() -> None:
    clock, key = Clock(), uuid.uuid4().hex
    from_zero = _meter(clock, key=key, tail_s=HOUR)
    from_zero.charge([_pod()])
    clock.now = 60.0
    from_zero.charge([_pod()])
    from_zero.pause()  # marks the run paid until 1 h 1 min
    static = _meter(clock, key=key, static=True, tail_s=600.0)
    static.charge([])
    clock.now = 60.0 + 1800.0
    assert static.pause() is None  # no tail for a static pool; its clock runs on
    assert static.charged_at == 60.0
    static.charge([])
    assert static.spent_usd == pytest.approx(4.0)  # the reservation bills regardless


# --- the caps -----------------------------------------------------------------------------
def test_the_run_cap_is_crossed_on_reaching_it_not_after() -> None:
    clock = Clock()
    meter = _meter(clock, static=True, run_cap=8.0)
    meter.charge([])
    clock.now = HOUR - 1.0
    assert meter.charge([]) is None
    clock.now = HOUR
    over = meter.charge([])
    assert over is not None and over.category is FailureCategory.BUDGET
    assert over.summary == ("stage train stopped: $8.00 of TPU time spent, cap "
                            "gke.max_usd_per_run $8.00")


def test_the_stage_cap_counts_the_stage_and_the_run_cap_the_whole_run() -> None:
    clock, key = Clock(), uuid.uuid4().hex
    convert = _meter(clock, static=True, key=key, stage="convert")
    convert.charge([])
    clock.now = HOUR
    convert.charge([])  # $8 spent by an earlier stage of the run
    train = _meter(clock, static=True, key=key, run_cap=100.0, stage_cap=4.0)
    train.charge([])
    clock.now = HOUR + 1800.0
    over = train.charge([])  # $4 in train: its own cap, whatever the run spent before
    assert over is not None
    assert over.summary == ("stage train stopped: $4.00 of TPU time spent, cap "
                            "gke.max_usd_per_stage.train $4.00")
    assert over.detail.startswith("    spent in this run so far: $12.00 ")
    capped_run = _meter(clock, static=True, key=key, run_cap=13.0, stage_cap=100.0,
                        stage="export")
    capped_run.charge([])
    clock.now = HOUR + 1800.0 + 450.0
    over = capped_run.charge([])  # $1 in export, $13 in the run
    assert over is not None and "$13.00 of TPU time spent, cap gke.max_usd_per_run $13.00" \
        in over.summary
    assert spent_in_run(key) == pytest.approx(13.0)


def test_when_both_caps_are_crossed_the_stages_is_named() -> None:
    clock = Clock()
    meter = _meter(clock, static=True, run_cap=5.0, stage_cap=5.0)
    meter.charge([])
    clock.now = HOUR
    over = meter.charge([])
    assert over is not None and "cap gke.max_usd_per_stage.train $5.00" in over.summary


def test_no_cap_never_stops_the_stage() -> None:
    clock = Clock()
    meter = _meter(clock, static=True)
    meter.charge([])
    clock.now = 1000 * HOUR
    assert meter.charge([]) is None and meter.crossed() is None


def test_the_tail_paid_at_pause_can_cross_the_cap() -> None:
    clock = Clock()
    meter = _meter(clock, run_cap=8.5, tail_s=600.0)
    meter.charge([_pod()])
    clock.now = HOUR
    assert meter.charge([_pod()]) is None  # $8
    over = meter.pause()  # + $1.33 of nodes the autoscaler has not removed yet
    assert over is not None and "$9.33 of TPU time spent" in over.summary


def test_the_budget_diagnosis_says_what_was_spent_and_both_ways_out() -> None:
    d = budget_diagnosis("evaluate", 1234.5, 1000.0, "gke.max_usd_per_stage.evaluate", 2345.6)
    assert d.category is FailureCategory.BUDGET and not d.retryable
    assert d.code == "gke/spend-cap"
    assert d.summary == ("stage evaluate stopped: $1,234.50 of TPU time spent, cap "
                         "gke.max_usd_per_stage.evaluate $1,000.00")
    assert d.detail == ("    spent in this run so far: $2,345.60 (held chip-hours × the "
                        "capacity mode's price, as the watch saw them)")
    assert d.fix == ("the JobSet was deleted so nothing holds the slice; checkpoints already "
                     "written are kept and the next run resumes from the newest. Raise "
                     "gke.max_usd_per_stage.evaluate if the run just needs longer, "
                     f"{LOWER_WORK}")


# --- which meter a profile gets ---------------------------------------------------------------
def _on_demand(**extra: str):
    price = {**QUOTED_PRICE, "usd_per_chip_hour": "1.5"}
    return tutorial_profile(**{**capacity_overrides("on-demand"),
                               **{f"gke.prices.on-demand.{k}": v for k, v in price.items()},
                               **extra})


def test_no_cap_no_meter() -> None:
    assert meter_for(tutorial_profile(), "train") is None
    assert meter_for(load_profile("rehearsal", {}, environ={}), "train") is None
    capped_train = tutorial_profile(**{"gke.max_usd_per_stage.train": "400"})
    assert meter_for(capped_train, "convert") is None  # no run cap, no cap on convert


def test_a_stage_cap_alone_meters_that_stage() -> None:
    profile = tutorial_profile(**{"gke.max_usd_per_stage.train": "400"})
    meter = meter_for(profile, "train", key="k")
    assert meter is not None
    assert (meter.run_cap, meter.stage_cap, meter.key) == (None, 400.0, "k")


def test_a_reservations_meter_is_a_static_pool_with_no_tail() -> None:
    clock = Clock()
    meter = meter_for(tutorial_profile(**{"gke.max_usd_per_run": "500"}), "convert",
                      clock=clock, key="run-1")
    assert meter is not None
    assert (meter.stage, meter.chips, meter.usd_per_chip_hour, meter.static_pool) == \
        ("convert", 32, 2.7, True)
    assert (meter.run_cap, meter.stage_cap, meter.key, meter.tail_s) == \
        (500.0, None, "run-1", 0.0)
    assert meter.clock is clock


def test_a_from_zero_meter_charges_the_slices_stages_and_the_tail() -> None:
    profile = _on_demand(**{"gke.max_usd_per_run": "500",
                            "gke.max_usd_per_stage.train": "400"})
    train = meter_for(profile, "train", key="run-2")
    convert = meter_for(profile, "convert", key="run-2")
    assert train is not None and convert is not None
    assert (train.chips, train.usd_per_chip_hour, train.static_pool, train.tail_s) == \
        (32, 1.5, False, 1200.0)  # the tail bound: unneeded + delay after add
    assert (train.run_cap, train.stage_cap) == (500.0, 400.0)
    assert (convert.chips, convert.stage_cap) == (0, None)  # the CPU pool: no TPU chips


def test_a_chain_meters_at_the_first_modes_price() -> None:
    """The cap admits the dearest mode (flows/config/spend.py); the meter charges the mode a
    run is served by as hoped, the chain's first."""
    profile = tutorial_profile(**capacity_overrides("spot,on-demand"),
                               **{"gke.max_usd_per_run": "400"})
    meter = meter_for(profile, "train", key="run-3")
    assert meter is not None and meter.usd_per_chip_hour == 1.0


def test_outside_a_flow_the_meter_uses_the_process_ledger() -> None:
    meter = meter_for(tutorial_profile(**{"gke.max_usd_per_run": "500"}), "train")
    assert meter is not None and meter.key == ""


# --- what a stop asks of the user -------------------------------------------------------------
def _stop_after(meter: SpendMeter, clock: Clock, seconds: float) -> Diagnosis | None:
    """The meter's verdict after ``seconds`` of its static pool (charged with no pod)."""
    assert meter.charge([]) is None
    clock.now += seconds
    return meter.charge([])


def test_every_stop_asks_for_less_work_with_the_schedule_the_run_trains_with() -> None:
    """The stage cap's, the run cap's and the team month's stops all name the profile's own
    length and schedule (a fix that lowered the length alone would restart training)."""
    base = {"train.args.num_batches": "40", "train.args.learning_rate_schedule_steps": "40"}
    want = lower_work_fix(tutorial_profile(**base).train.args)
    assert "train.args.learning_rate_schedule_steps: 40" in want
    hour = 32 * 2.7  # the tutorial's reservation: 32 chips at its price
    for cap, caps in ((400, {"gke.max_usd_per_stage.train": "400"}),
                      (500, {"gke.max_usd_per_run": "500"})):
        clock = Clock()
        meter = meter_for(tutorial_profile(**base, **caps), "train", clock=clock,
                          key=uuid.uuid4().hex)
        assert meter is not None
        stop = _stop_after(meter, clock, cap / hour * HOUR + 1)
        assert stop is not None and stop.code == "gke/spend-cap" and stop.fix.endswith(want)
    key, clock = uuid.uuid4().hex, Clock()
    grant(key, Allowance("lab", "2026-12", 50.0))
    meter = meter_for(tutorial_profile(**base), "train", clock=clock, key=key)
    assert meter is not None
    stop = _stop_after(meter, clock, 50 / hour * HOUR + 1)
    assert stop is not None and stop.code == STOPPED and stop.fix.endswith(want)
    assert stop.summary.startswith("stage train stopped: this run spent $")
    assert stop.detail == "    the team's month is in the spend ledger: tpurl costs lab"


def test_the_teams_month_read_again_stops_the_run_at_what_is_left_now() -> None:
    """Another run of the team spent meanwhile: the ledger read again after RECHECK_S
    leaves $5, and the run that was granted $1,000 stops at that."""
    key, clock = uuid.uuid4().hex, Clock()
    grant(key, Allowance("lab", "2026-12", 1000.0))
    rechecked_by(key, lambda: Allowance("lab", "2026-12", 5.0))
    meter = meter_for(tutorial_profile(), "train", clock=clock, key=key)
    assert meter is not None
    stop = _stop_after(meter, clock, RECHECK_S + 1)  # $7.22 of the reservation
    assert stop is not None and stop.code == STOPPED
    assert "left of 2026-12 ($5.00)" in stop.summary


def test_the_teams_month_stops_the_run_on_reaching_what_was_left_not_after() -> None:
    key, clock = uuid.uuid4().hex, Clock()
    grant(key, Allowance("lab", "2026-12", 32 * 2.7))  # an hour of the tutorial's slice
    meter = meter_for(tutorial_profile(), "train", clock=clock, key=key)
    assert meter is not None
    assert _stop_after(meter, clock, HOUR - 1) is None
    clock.now += 1
    stop = meter.charge([])
    assert stop is not None and stop.code == STOPPED
