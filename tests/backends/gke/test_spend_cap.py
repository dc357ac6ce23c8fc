"""The spend cap (gke.max_usd_per_run, gke.max_usd_per_stage): refused below the estimate at
load, shown in the plan, and enforced by the watch against the fake cluster with a clock the
test moves, so "one hour passed" is a statement, not a wait."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import pytest

from flows.backends.gke.infra.cost import cost_plan, render_caps
from flows.backends.gke.watch.spend import SpendMeter, meter_for, spent_in_run
from flows.config import ProfileError
from flows.config.capacity import CAPACITY_MODES
from flows.config.spend import estimated_run_usd, estimated_stage_usd
from flows.core.failures import FailureCategory, StageFailed
from flows.core.layout import Layout
from flows.core.programs import train_workload
from flows.core.storage import file_uri
from flows.core.team_budget import Allowance, grant, release
from tests.fakes.gke_backend import ListLogger, jobsets_created, make_backend
from tests.fakes.kube_api import FakeApiServer, FakeKube
from tests.fakes.kube_api.nodepools import Autoscaler, TpuPool
from tests.fakes.kube_api.scenarios import admit, say, scenario, start, succeed
from tests.support.fake_clock import Clock
from tests.support.profiles import fake_hf_token, tutorial_profile

PRICE = {"usd_per_chip_hour": "1.0", "source": "a quote", "as_of": "2026-12-01"}


def wait_for(predicate, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("HF_TOKEN", fake_hf_token("AkWvj7FAc9"))
    with FakeApiServer(FakeKube()) as running:
        yield running


# --- the profile rule and the plan ------------------------------------------------------------
# tpu-hosts conversion is refused at load with a pool that scales from zero
@pytest.mark.parametrize("evaluates", [False, True])
@pytest.mark.parametrize(("mode", "placement"), [*((m, "cpu-pool") for m in CAPACITY_MODES),
                                                 ("reservation", "tpu-hosts")])
def test_the_caps_estimate_is_the_plans_in_every_mode(mode: str, placement: str,
                                                       evaluates: bool) -> None:
    extra = {"gke.conversion_placement": placement,
             **({"eval.batches": "2"} if evaluates else {})}
    profile = tutorial_profile(**extra) if mode == "reservation" else _mode(mode, **extra)
    plan = cost_plan(profile)
    assert estimated_run_usd(profile) == pytest.approx(plan.usd)
    for stage in plan.stages:
        assert estimated_stage_usd(profile, stage.stage) == pytest.approx(stage.usd)
    evaluate = [s for s in plan.stages if s.stage == "evaluate"]
    assert len(evaluate) == int(evaluates)
    if evaluates:  # on the slice in every mode: its rollouts are training's vLLM engine
        assert evaluate[0].busy_chip_hours == pytest.approx(evaluate[0].hours * 32)
        assert evaluate[0].usd > 0


def _mode(mode: str, **extra: str):
    fields = {"gke.capacity": mode, "gke.reservation": "",
              **{f"gke.prices.{mode}.{k}": v for k, v in PRICE.items()}, **extra}
    if mode in ("flex-start", "queued"):
        fields["gke.max_run_hours"] = "5"
    return tutorial_profile(**fields)


def test_a_cap_below_the_estimate_is_refused_naming_the_field_and_the_figure() -> None:
    estimate = estimated_run_usd(tutorial_profile())  # 32 chips × 5 h × $2.70 = $432
    with pytest.raises(ProfileError) as caught:
        tutorial_profile(**{"gke.max_usd_per_run": "100"})
    issue = next(i for i in caught.value.issues if i.field == "gke.max_usd_per_run")
    assert f"${estimate:,.2f}" in issue.problem and "100.00" in issue.problem
    assert f"{estimate:.2f}" in issue.fix
    with pytest.raises(ProfileError) as caught:
        tutorial_profile(**{"gke.max_usd_per_stage.train": "10"})
    assert [i.field for i in caught.value.issues] == ["gke.max_usd_per_stage.train"]
    with pytest.raises(ProfileError):
        tutorial_profile(**{"gke.max_usd_per_stage.image": "10"})  # not a TPU stage


def test_the_plan_shows_the_cap_against_the_estimate() -> None:
    profile = tutorial_profile(**{"gke.max_usd_per_run": "500",
                                  "gke.max_usd_per_stage.train": "400"})
    text = "\n".join(render_caps(profile))
    assert "$500.00 per run against the estimate of $432.00" in text
    assert "$400.00 for train against its estimate of $345.60" in text
    assert "spend cap: none" in render_caps(tutorial_profile())[0]


# --- the meter, pure --------------------------------------------------------------------------
TPU_CONTAINER = [{"name": "pathways-worker", "resources": {"limits": {"google.com/tpu": "4"}}}]
HEAD = {"spec": {"nodeName": "cpu-np-node-0", "containers": [
    {"name": "pathways-rm", "resources": {"requests": {"cpu": "8"}}}]},
    "status": {"phase": "Pending"}}  # pulling its image on cpu-np: no TPU node exists
BOUND = [HEAD, {"spec": {"nodeName": "tpu-node-0", "containers": TPU_CONTAINER},
                "status": {"phase": "Running"}}]
UNBOUND = [HEAD, {"spec": {"nodeName": "", "containers": TPU_CONTAINER},
                  "status": {"phase": "Pending"}}]


def _meter(clock: Clock, static: bool = False, run_cap: float | None = 10.0,
           stage_cap: float | None = None, key: str | None = None) -> SpendMeter:
    return SpendMeter("train", 8, 1.0, static, run_cap, stage_cap, key or uuid.uuid4().hex,
                      clock)


def test_a_pool_from_zero_is_charged_only_while_a_tpu_pod_holds_a_node() -> None:
    clock = Clock()
    meter = _meter(clock)
    assert meter.charge([HEAD]) is None
    clock.now = 1800.0
    assert meter.charge([HEAD]) is None and meter.spent_usd == 0.0  # the head alone: no TPU
    assert meter.charge(UNBOUND) is None
    clock.now = 3600.0
    assert meter.charge(UNBOUND) is None and meter.spent_usd == 0.0  # waiting for scale-up
    clock.now = 5400.0
    assert meter.charge(BOUND) is None and meter.spent_usd == pytest.approx(4.0)  # 8 × 0.5 h
    clock.now = 7200.0
    assert meter.charge(BOUND) is None and meter.spent_usd == pytest.approx(8.0)
    clock.now = 7200.0 + 900.0  # + 8 chips × 0.25 h: $10, the cap
    over = meter.charge(BOUND)
    assert over is not None and over.category is FailureCategory.BUDGET
    assert "$10.00 of TPU time spent, cap gke.max_usd_per_run $10.00" in over.summary
    assert over.code == "gke/spend-cap" and not over.retryable


def test_the_scale_down_tail_is_charged_once_when_the_watch_ends() -> None:
    """The nodes stay 10 min after the TPU pods end: ``pause`` charges that tail, and a
    resubmission binding within it is charged only from the tail's end."""
    clock, key = Clock(), uuid.uuid4().hex
    meter = SpendMeter("train", 8, 1.0, False, None, None, key, clock, tail_s=600.0)
    meter.charge(BOUND)
    clock.now = 1800.0
    meter.charge(BOUND)  # 8 × 0.5 h
    assert meter.pause() is None and meter.spent_usd == pytest.approx(4.0 + 8 * 600 / 3600)
    clock.now = 2100.0  # resubmitted 5 min later: the tail already paid those minutes
    meter.charge(BOUND)
    clock.now = 2700.0
    meter.charge(BOUND)
    assert spent_in_run(key) == pytest.approx(8 * 2700 / 3600 + 8 * 0 / 3600)
    meter.pause()
    meter.pause()  # nothing held since: no second tail
    assert spent_in_run(key) == pytest.approx(8 * 3300 / 3600)
    idle = SpendMeter("export", 8, 1.0, False, None, None, uuid.uuid4().hex, clock, tail_s=600.0)
    idle.charge([HEAD])
    idle.pause()  # never held a TPU node: no tail
    assert idle.spent_usd == 0.0


def test_a_static_pool_is_charged_without_pods_and_across_submissions() -> None:
    clock = Clock()
    meter = _meter(clock, static=True, run_cap=None, stage_cap=5.0)
    meter.charge([])
    clock.now = 1800.0
    meter.pause()  # between submissions: the reservation bills on
    over = meter.charge([])  # 8 chips × 0.5 h × $1 = $4: under the stage cap of $5
    assert over is None and meter.spent_usd == pytest.approx(4.0)
    clock.now = 2700.0
    over = meter.charge([])
    assert over is not None and "$6.00 of TPU time spent, cap gke.max_usd_per_stage.train " \
        "$5.00" in over.summary


def test_the_run_cap_sums_the_stages_of_one_run() -> None:
    clock, key = Clock(), uuid.uuid4().hex
    first = SpendMeter("convert", 8, 1.0, True, 10.0, None, key, clock)
    first.charge([])
    clock.now = 3600.0
    assert first.charge([]) is None  # $8 of $10
    second = SpendMeter("train", 8, 1.0, True, 10.0, None, key, clock)
    second.charge([])
    clock.now = 3600.0 + 900.0
    over = second.charge([])  # + $2: the run reaches its cap in its second stage
    assert over is not None and spent_in_run(key) == pytest.approx(10.0)
    assert meter_for(tutorial_profile(), "train") is None  # no cap, nothing metered


# --- against the fake cluster -----------------------------------------------------------------
def _an_hour_on_the_slice(server: FakeApiServer, tmp_path: Path, profile,
                          key: str) -> tuple[object, Autoscaler, Path]:
    """Train on an on-demand pool from zero (8 hosts) until step 1's checkpoint, then move
    the test's clock an hour (the nodes' creationTimestamp and the meter's wall clock with
    it): the stage's outcome, the autoscaler (the caller stops it) and the checkpoint."""
    wall_now = [float(int(time.time()))]
    scaler = Autoscaler(server.kube, TpuPool(), wall=lambda: wall_now[0])
    checkpoint = tmp_path / "checkpoints" / "actor" / "1" / "model_params"

    def save_checkpoint(kube: FakeKube, name: str) -> None:
        checkpoint.mkdir(parents=True)
        (checkpoint / "_METADATA").write_text("{}")

    scenario(server.kube, [(0.05, admit), (0.05, start), (0.05, say("Train step 1")),
                           (0.05, save_checkpoint), (30.0, succeed)])
    clock = Clock()
    backend = make_backend(server.url, "train", tmp_path, ListLogger(), profile=profile)
    backend.spend = meter_for(profile, "train", clock=clock, key=key)
    assert backend.spend is not None
    backend.spend.wall = lambda: wall_now[0]
    workload = train_workload(profile, Layout(profile), backend.runtime)
    outcome: list[object] = []
    runner = threading.Thread(target=lambda: outcome.append(_run(backend, workload, tmp_path)))
    try:
        runner.start()
        assert wait_for(checkpoint.is_dir, 10.0)  # the slice is up, training saved step 1
        assert backend.spend.spent_usd == 0.0  # no time passed
        clock.now = 3600.0
        wall_now[0] += 3600.0
        runner.join(20.0)
        assert not runner.is_alive()
        (failure,) = outcome
    except BaseException:
        scaler.stop()
        raise
    return failure, scaler, checkpoint


def test_crossing_the_cap_deletes_the_jobset_keeps_checkpoints_and_fails_budget(
        server: FakeApiServer, tmp_path: Path) -> None:
    """On-demand pool from zero, the tutorial's 32 chips at $1/chip-h, cap $30: one
    hour of the slice's nodes (the test moves the clock) costs $32, so the watch stops the
    stage (the estimate: 0.5 h + the 20 min scale-down tail bound, × 32 chips = $26.67)."""
    profile = _mode("on-demand", **{"gke.max_usd_per_run": "30",
                                    "gke.estimated_hours.train": "0.5"})
    failure, scaler, checkpoint = _an_hour_on_the_slice(server, tmp_path, profile,
                                                        uuid.uuid4().hex)
    try:
        assert isinstance(failure, StageFailed), failure
        d = failure.diagnosis
        assert d.category is FailureCategory.BUDGET and not d.retryable
        assert "$32.00 of TPU time spent, cap gke.max_usd_per_run $30.00" in d.summary, d.summary
        assert "tpurl support-bundle" in d.fix
        assert wait_for(lambda: not server.kube.find("jobsets"))  # deleted: nothing held
        assert wait_for(lambda: not scaler.nodes, 10.0)  # and the slice went away
        assert (checkpoint / "_METADATA").is_file()  # the resume point is kept
        assert jobsets_created(server.kube) == 1  # a budget verdict is never resubmitted
    finally:
        scaler.stop()


def test_a_team_month_spent_stops_the_stage_like_the_cap(server: FakeApiServer,
                                                          tmp_path: Path) -> None:
    """No per-run cap, but the run's team had $20 left at its start (flows/core/team_budget.py
    grant): one hour of the tutorial's 32 chips at $1/chip-h spends $32, so the same watch
    stops the stage with the team's code, deletes the JobSet, keeps the checkpoint and never
    resubmits."""
    profile = _mode("on-demand", **{"gke.estimated_hours.train": "0.5"})
    assert profile.gke is not None and profile.gke.max_usd_per_run is None
    key = uuid.uuid4().hex
    grant(key, Allowance("tutorial", "2026-12", 20.0))
    try:
        failure, scaler, checkpoint = _an_hour_on_the_slice(server, tmp_path, profile, key)
        try:
            assert isinstance(failure, StageFailed), failure
            d = failure.diagnosis
            assert d.category is FailureCategory.BUDGET and not d.retryable
            assert d.code == "gke/team-budget" and "team tutorial" in d.summary, d.summary
            assert wait_for(lambda: not server.kube.find("jobsets"))
            assert (checkpoint / "_METADATA").is_file()
            assert jobsets_created(server.kube) == 1
        finally:
            scaler.stop()
    finally:
        release(key)


def _run(backend, workload, tmp: Path) -> object:
    try:
        return backend.run_workload(workload, file_uri(tmp / "train.log"))
    except StageFailed as exc:
        return exc


def _ended_worker(bound_at: str, finished_at: str | None) -> dict:
    state = {"exitCode": 0, "reason": "Completed", "startedAt": bound_at}
    if finished_at:
        state["finishedAt"] = finished_at
    return {"metadata": {"uid": f"worker-{bound_at}-{finished_at}"},
            "spec": {"nodeName": "tpu-node-0", "containers": TPU_CONTAINER},
            "status": {"phase": "Succeeded", "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": bound_at}],
                "containerStatuses": [{"name": "pathways-worker",
                                       "state": {"terminated": state}}]}}


def test_a_slice_that_lived_between_two_looks_is_charged_from_its_pods_record() -> None:
    """Bound, run and ended while the watch was away (dropped, 5xx): the pods' own record
    (PodScheduled's time, the container's finishedAt) gives the half hour, charged once, and
    the scale-down tail after it; a record without its end charges nothing (no guess)."""
    clock = Clock()
    meter = SpendMeter("train", 8, 1.0, False, None, None, uuid.uuid4().hex, clock, tail_s=600.0)
    meter.charge(UNBOUND)
    clock.now = 7200.0
    ended = [HEAD, _ended_worker("2026-12-04T10:00:00Z", "2026-12-04T10:30:00Z")]
    meter.charge(ended)
    held = 8 * 1799 / 3600  # 8 chips × 0.5 h, the binding's whole second rounded up
    assert meter.spent_usd == pytest.approx(held)
    clock.now = 7260.0
    meter.charge(ended)  # seen again: nothing more
    assert meter.spent_usd == pytest.approx(held)
    meter.pause()
    assert meter.spent_usd == pytest.approx(held + 8 * 600 / 3600)

    partial = SpendMeter("train", 8, 1.0, False, None, None, uuid.uuid4().hex, clock, 600.0)
    partial.charge([HEAD, _ended_worker("2026-12-04T10:00:00Z", None)])
    partial.pause()
    assert partial.spent_usd == 0.0


def test_a_slice_seen_holding_is_charged_by_the_ticks_not_again_by_its_record() -> None:
    """Seen bound at the first look (the record's binding is that moment), then ended an hour
    later by its record while the ticks charged half an hour up to the last look: the record
    does not charge the pod a second time."""
    clock = Clock()
    meter = SpendMeter("train", 8, 1.0, False, None, None, uuid.uuid4().hex, clock)
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    running = _ended_worker(now, None)
    running["status"]["phase"] = "Running"
    meter.charge([HEAD, running])
    clock.now = 1800.0
    meter.charge([HEAD, running])
    ended = _ended_worker(now, "2099-01-01T00:00:00Z")
    ended["metadata"] = running["metadata"]  # the same pod, now ended
    clock.now = 1860.0
    meter.charge([HEAD, ended])
    assert meter.spent_usd == pytest.approx(4.0)  # the ticks' half hour


def _constant_reward_events(steps: int) -> bytes:
    """Tunix's reward tags for a constant reward: every completion scores 1.0, so the
    batch's min equals its max at every step (tests/support/tfevents.py's framing)."""
    import struct

    from tests.support.tfevents import pb_field, tf_event, tf_record

    def scalar(tag: str, value: float) -> bytes:
        return pb_field(1, 2, tag.encode()) + pb_field(2, 5, struct.pack("<f", value))

    records = [tf_record(pb_field(3, 2, b"brain.Event:2"))]
    for step in range(steps):
        for tag in ("mean", "min", "max", "constant"):
            records.append(tf_record(tf_event(step, scalar(f"rewards/train/{tag}", 1.0))))
    return b"".join(records)


def test_a_stop_policy_finding_deletes_the_jobset_like_the_cap_and_says_what_it_saved(
        server: FakeApiServer, tmp_path: Path) -> None:
    """The training writes two steps of a constant reward; with health.group_collapse.policy
    stop the sentinel's watch fails the stage through the spend stop's path: the JobSet
    deleted, the checkpoint kept, never resubmitted, the diagnosis naming the detector, the
    step and the spend saved."""
    from flows.backends.gke.watch.health import STOP_CODE, HealthWatch

    profile = _mode("on-demand", **{"gke.estimated_hours.train": "0.5",
                                    "health.group_collapse.policy": "stop"})
    run_dir = tmp_path / "run"
    checkpoint = tmp_path / "checkpoints" / "actor" / "1" / "model_params"

    def train_two_steps(kube: FakeKube, name: str) -> None:
        checkpoint.mkdir(parents=True)
        run_dir.mkdir()
        (run_dir / "events.out.tfevents.1.host").write_bytes(_constant_reward_events(2))

    scenario(server.kube, [(0.05, admit), (0.05, start), (0.05, train_two_steps),
                           (30.0, succeed)])
    logger = ListLogger()
    backend = make_backend(server.url, "train", tmp_path, logger, profile=profile)
    backend.spend = None
    backend.health = HealthWatch(profile, backend.storage, file_uri(run_dir), "run-1", 10,
                                 40.0, lambda line: logger.warning("%s", line), every_s=0.0)
    failure = _run(backend, train_workload(profile, Layout(profile), backend.runtime), tmp_path)
    assert isinstance(failure, StageFailed), failure
    d = failure.diagnosis
    assert d.code == STOP_CODE and not d.retryable
    assert "group_collapse at step 1" in d.summary, d.summary
    assert "spend saved: about $36.00" in d.detail, d.detail  # 9 of 10 steps of $40
    assert wait_for(lambda: not server.kube.find("jobsets"))
    assert checkpoint.is_dir()  # the resume point is kept
    assert jobsets_created(server.kube) == 1
