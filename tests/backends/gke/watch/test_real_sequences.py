"""The GKE backend through sequences as the real controllers order them (tests/fakes/kube_api
scenarios.stop_pods, restarts.py, each citing the upstream file that decides it).

A cluster's kubelet posts the stopped containers' exit codes (143 after SIGTERM, 137 once
the grace period ran out) and the Failed phase before it lets a deleted pod go, and a
JobSet restart counts ``status.restarts`` up before its new Jobs exist: an eviction played
as "deletionTimestamp, then gone", or no failure-policy restart at all, would hide what
each verdict here must read."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from flows.backends.gke.watch.host_memory import CODE as HOST_MEMORY
from flows.backends.gke.watch.scaling import no_pool_fits
from flows.config import Profile
from flows.core.failures import FailureCategory, StageFailed
from tests.fakes.gke_backend import BUDGETS, jobsets_created, run_stage
from tests.fakes.kube_api import FakeApiServer, FakeKube
from tests.fakes.kube_api.host_memory import worker_evicted_for_memory, worker_oom_killed
from tests.fakes.kube_api.nodepools import Autoscaler, TpuPool
from tests.fakes.kube_api.restarts import job_fails, old_attempt_disrupted
from tests.fakes.kube_api.scenarios import (
    Action,
    admit,
    evict_releasing,
    exit_with,
    say,
    scenario,
    start,
    succeed,
)
from tests.support.profiles import (
    capacity_overrides,
    fake_hf_token,
    tutorial_profile,
    with_gke,
)


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeApiServer]:
    monkeypatch.setenv("HF_TOKEN", fake_hf_token("realsequences"))
    with FakeApiServer(FakeKube()) as srv:
        yield srv


def kept(log_uri: str) -> str:
    return Path(log_uri.removeprefix("file://")).read_text()


@pytest.mark.parametrize("exit_code", [143, 137], ids=["sigterm", "grace-period-ran-out"])
def test_an_eviction_whose_pods_report_their_stop_keeps_the_same_jobset(
        server: FakeApiServer, tmp_path: Path, exit_code: int) -> None:
    """Kueue preempts: the stopped head reports exit 143 (or 137) with a deletionTimestamp
    before it goes. The verdict read that as the program's end: "was stopped by SIGTERM"
    (deleted, resubmitted: the queue position lost) or, for 137, "killed (SIGKILL), most
    likely by the out-of-memory killer", a user error that is not retried."""
    script = [(0.1, admit), (0.05, start), (0.05, say("step 1", "saved checkpoint 1")),
              (0.1, evict_releasing(0.3, exit_code)), (0.3, admit), (0.05, start),
              (0.05, say("restored checkpoint 1", "step 2")), (0.1, succeed)]
    kube = scenario(server.kube, script)
    outcome, logger, log_uri, _ = run_stage(server, "train", tmp_path)
    assert not isinstance(outcome, StageFailed), outcome
    assert jobsets_created(kube) == 1 and outcome.submissions == 1
    assert "restored checkpoint 1" in kept(log_uri)
    assert any("evicted by Kueue" in line for line in logger.lines), logger.lines


def restarting(max_restarts: int) -> Profile:
    return with_gke(tutorial_profile(), train_max_restarts=max_restarts)


@pytest.mark.parametrize("compacted", [False, True], ids=["watched", "410-in-the-restart"])
def test_a_failure_policy_restart_is_followed_into_the_new_attempt(
        server: FakeApiServer, tmp_path: Path, compacted: bool) -> None:
    """A worker Job fails (BackoffLimitExceeded, no rule matches: RestartJobSet): the JobSet
    counts the restart, deletes the attempt's Jobs (the head reports 143 as it goes), then
    creates the next attempt's. The verdict failed the stage on the head's 143. With
    ``compacted`` the watches lose their place in the middle and must list again."""
    script = [(0.1, admit), (0.05, start), (0.05, say("step 1", "saved checkpoint 1")),
              (0.1, job_fails("worker", compact_between=compacted)), (0.5, start),
              (0.05, say("restored checkpoint 1", "step 2")), (0.1, succeed)]
    kube = scenario(server.kube, script)
    outcome, _, log_uri, _ = run_stage(server, "train", tmp_path, profile=restarting(1))
    assert not isinstance(outcome, StageFailed), outcome
    assert jobsets_created(kube) == 1 and outcome.submissions == 1
    jobset = kube.find("jobsets")[0] if kube.find("jobsets") else None
    assert jobset is None or jobset["status"]["restarts"] == 1
    assert "restored checkpoint 1" in kept(log_uri)


def test_restarts_spent_name_the_jobsets_reason_not_the_stopped_head(
        server: FakeApiServer, tmp_path: Path) -> None:
    """train_max_restarts 0 (the default): the worker Job's failure fails the JobSet
    (ReachedMaxRestarts) and the JobSet then deletes the head's Job. The head's 143 is the
    stop's, not a cause: the diagnosis names the JobSet's reason and its first failed job."""
    script = [(0.1, admit), (0.05, start), (0.05, say("step 1")), (0.1, job_fails("worker"))]
    scenario(server.kube, script)
    outcome, _, _, _ = run_stage(server, "train", tmp_path, profile=restarting(0))
    assert isinstance(outcome, StageFailed), outcome
    diagnosis = outcome.diagnosis
    assert diagnosis.category is FailureCategory.INFRASTRUCTURE, diagnosis
    assert "ReachedMaxRestarts" in diagnosis.summary and "-worker-0" in diagnosis.summary
    assert "SIGTERM" not in diagnosis.summary


def test_an_old_attempts_late_disruption_is_not_the_new_attempts(
        server: FakeApiServer, tmp_path: Path) -> None:
    """A worker Job fails and the JobSet restarts; a pod of the attempt it ended, still
    stopping, is then marked DisruptionTarget (its node shut down). The watch tagged that
    disruption with the JobSet's restart count at the time (the new attempt's), so when the
    new attempt's program failed on its own the stage was "preempted" and resubmitted to
    fail again; the pod's restart-attempt label says which attempt it was."""
    script = [(0.1, admit), (0.05, start), (0.05, say("step 1")),
              (0.1, job_fails("worker")), (0.15, old_attempt_disrupted), (0.4, start),
              (0.05, say("Traceback (most recent call last):",
                         "ValueError: num_generations must divide the batch")),
              (0.1, exit_with(1))]
    kube = scenario(server.kube, script)
    outcome, _, _, _ = run_stage(server, "train", tmp_path, profile=restarting(1))
    assert isinstance(outcome, StageFailed), outcome
    diagnosis = outcome.diagnosis
    assert diagnosis.category is FailureCategory.USER_ERROR, diagnosis
    assert "num_generations" in diagnosis.summary and "disrupted" not in diagnosis.summary
    assert jobsets_created(kube) == 1


def test_the_pathways_workers_start_after_the_head_as_jobset_in_order_does(
        server: FakeApiServer, tmp_path: Path) -> None:
    """jobset v0.10.1 resumeJobsIfNecessary (startupPolicy InOrder, as google/pathways-job
    builds it too): once Kueue unsuspends the JobSet only the head's Job is resumed; the
    workers' Jobs stay suspended, so no worker pod exists, until the head's pods are
    ready. The fake made every pod at admission."""
    seen: dict[str, tuple[list[str], list[bool]]] = {}

    def record(moment: str) -> Action:
        def look(kube: FakeKube, name: str) -> None:
            pods = kube.find("pods", "default", f"jobset.sigs.k8s.io/jobset-name={name}")
            jobs = kube.find("jobs", "default", f"jobset.sigs.k8s.io/jobset-name={name}")
            seen[moment] = (
                sorted({f"{p['metadata']['labels']['jobset.sigs.k8s.io/replicatedjob-name']}"
                        f":{p['status']['phase']}" for p in pods}),
                [bool(j["spec"].get("suspend")) for j in jobs
                 if j["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"] ==
                 "worker"])
        look.__name__ = f"record-{moment}"
        return look

    script = [(0.1, admit), (0.05, record("admitted")), (0.05, start),
              (0.05, record("started")), (0.05, say("step 1")), (0.1, succeed)]
    scenario(server.kube, script)
    outcome, _, _, _ = run_stage(server, "train", tmp_path)
    assert not isinstance(outcome, StageFailed), outcome
    assert seen["admitted"] == (["pathways-head:Pending"], [True]), seen
    assert seen["started"] == (["pathways-head:Running", "worker:Running"], [False]), seen


@pytest.mark.parametrize("ends", [worker_oom_killed, worker_evicted_for_memory],
                         ids=["oom-killed", "evicted-for-memory"])
def test_a_tpu_host_out_of_memory_is_the_sizing_error_it_is(
        server: FakeApiServer, tmp_path: Path, ends: Action) -> None:
    """The head's traceback after it lost the worker was the summary ("failed: RuntimeError:
    pathways workers ... unreachable": fix the traceback), and a memory eviction, marked
    DisruptionTarget, was resubmitted as a preemption to run out of memory again."""
    script = [(0.1, admit), (0.05, start), (0.05, say("step 1")), (0.1, ends)]
    kube = scenario(server.kube, script, script)
    outcome, _, _, _ = run_stage(server, "train", tmp_path)
    assert isinstance(outcome, StageFailed), outcome
    diagnosis = outcome.diagnosis
    assert diagnosis.category is FailureCategory.USER_ERROR and diagnosis.code == HOST_MEMORY
    assert "pathways-worker" in diagnosis.summary and "node-" in diagnosis.summary
    assert "gke.topology" in diagnosis.fix and "train.args" in diagnosis.fix
    assert jobsets_created(kube) == 1


@pytest.mark.parametrize("mode", ["on-demand", "flex-start"])
def test_a_slice_no_node_pool_can_hold_fails_as_the_mismatch_it_is(
        server: FakeApiServer, tmp_path: Path, mode: str) -> None:
    """The autoscaler says why it does not scale up ("pod didn't trigger scale-up: 1
    node(s) didn't match Pod's node affinity/selector"). The verdict waited out the budget
    and blamed capacity: on-demand "the node pool lacks capacity ... retried", flex-start
    the whole queue budget, then "no slice was free in the zone"."""
    scaler = Autoscaler(server.kube, TpuPool(mismatch=True))
    try:
        scenario(server.kube, [(0.05, admit), (0.05, start), (0.1, succeed)])
        # the scheduling budget must outlast the autoscaler's NotTriggerScaleUp reaching the
        # watch (on a cluster it comes within a scan, ~10 s, of a 30 min budget); 0.5 s was
        # once too short on a loaded machine, and on-demand then blamed capacity
        budgets = dataclasses.replace(BUDGETS, schedule_s=3.0, queue_s=20,
                                      waits_for_capacity=mode == "flex-start")
        outcome, _, _, _ = run_stage(server, "train", tmp_path, budgets,
                                     profile=tutorial_profile(**capacity_overrides(mode)))
    finally:
        scaler.stop()
    assert isinstance(outcome, StageFailed), outcome
    diagnosis = outcome.diagnosis
    assert diagnosis.category is FailureCategory.USER_ERROR, diagnosis
    assert "didn't match Pod's node affinity/selector" in diagnosis.summary
    assert "gke.topology" in diagnosis.fix and "gke.machine_type" in diagnosis.fix


@pytest.mark.parametrize(("message", "decides"), [
    ("pod didn't trigger scale-up: 1 node(s) didn't match Pod's node affinity/selector", True),
    ("pod didn't trigger scale-up: 2 Insufficient google.com/tpu", True),
    # ReasonsMessage aggregates node groups in map order: a passing reason anywhere passes
    ("pod didn't trigger scale-up: 1 node(s) didn't match Pod's node affinity/selector, "
     "1 max node group size reached", False),
    ("pod didn't trigger scale-up: 1 in backoff after failed scale-up", False),
    ("pod didn't trigger scale-up: max total nodes in cluster reached", False),
    ("pod didn't trigger scale-up: ", False),  # every group skipped as not existing (yet)
    ("Unschedulable pod didn't trigger scale-up, because it's consuming "
     "ProvisioningRequest default/train-rl-x", False),  # processors/provreq/pods_filter.go
])
def test_only_a_not_triggered_scale_up_with_no_passing_reason_says_no_pool_fits(
        message: str, decides: bool) -> None:
    event = {"reason": "NotTriggerScaleUp", "message": message}
    assert (no_pool_fits([event]) is not None) is decides
    later = {"reason": "TriggeredScaleUp", "message": "pod triggered scale-up: [...]"}
    assert no_pool_fits([event, later]) is None  # only the newest event speaks
