"""GkeBackend against the fake API over HTTP, driven by scenarios of state transitions.

Each scenario asserts the outcome (returned run, or StageFailed with its category), the
objects created (how many JobSets, which Secret), and that the run's canary token appears in
no object but the Secret's data, in no log line, kept log or exception text.
"""

from __future__ import annotations

import json
import multiprocessing
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from flows.backends.gke.watch.forbidden import FORBIDDEN_CODE
from flows.core.budgets import Budgets
from flows.core.failures import FailureCategory, StageFailed
from flows.core.layout import Layout
from flows.core.programs import convert_workload, train_workload
from flows.core.storage import LocalStorage, file_uri
from tests.fakes.gke_backend import (
    BUDGETS,
    ListLogger,
    jobsets_created,
    make_backend,
    no_jobsets_left,
    run_stage,
)
from tests.fakes.kube_api import FakeApiServer, FakeKube
from tests.fakes.kube_api.scenarios import (
    admit,
    disrupt_and_fail,
    evict,
    exit_with,
    image_pull_backoff,
    operator_deletes,
    say,
    scenario,
    start,
    succeed,
)
from tests.support.profiles import fake_hf_token

CANARY = fake_hf_token("CANARYbackend")


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeApiServer]:
    monkeypatch.setenv("HF_TOKEN", CANARY)
    with FakeApiServer(FakeKube()) as srv:
        yield srv


def assert_no_canary(kube: FakeKube, logger: ListLogger, log_uri: str, outcome: Any) -> None:
    with kube.cond:
        objects = [o for (plural, _, _), o in kube.objects.items() if plural != "secrets"]
        events = [o for _, plural, _, o in kube.history if plural != "secrets"]
    texts = [json.dumps(objects), json.dumps(events), "\n".join(logger.lines), str(outcome)]
    path = LocalStorage().local_path(log_uri)
    if path and path.exists():
        texts.append(path.read_text())
    for text in texts:
        assert CANARY not in text
    secrets = kube.find("secrets")
    assert len(secrets) == 1 and "stringData" not in secrets[0]


# train_rl's step lines (peft_trainer.py), which the run's log shows (its progress regex)
TRAIN_OK = [(0.1, admit), (0.05, start),
            (0.05, say("Train step 1 training loss: 1.0", f"WARNING: token {CANARY}")),
            (0.1, say("Train step 2 training loss: 0.9")), (0.1, succeed)]


def test_success_streams_the_log_and_keeps_it(server: FakeApiServer, tmp_path: Path) -> None:
    kube = scenario(server.kube, TRAIN_OK)
    outcome, logger, log_uri, backend = run_stage(server, "train", tmp_path)
    assert not isinstance(outcome, StageFailed), outcome
    assert jobsets_created(kube) == 1 and backend.submitted == [outcome_name(kube)]
    kept = Path(log_uri.removeprefix("file://")).read_text()
    assert "Train step 2 training loss: 0.9" in kept and "token ***" in kept
    assert any("[train" in line and "Train step 1" in line for line in logger.lines)
    assert_no_canary(kube, logger, log_uri, outcome)


def outcome_name(kube: FakeKube) -> str:
    (name,) = [n for (plural, n) in kube.created if plural == "jobsets"]
    return name


def test_kueue_eviction_keeps_the_same_jobset(server: FakeApiServer, tmp_path: Path) -> None:
    """Kueue re-queues an evicted Workload by itself: the backend keeps the same JobSet,
    since deleting and resubmitting it would lose the queue position."""
    script = [(0.1, admit), (0.05, start), (0.05, say("step 1", "saved checkpoint 1")),
              (0.1, evict), (0.3, admit), (0.05, start),
              (0.05, say("restored checkpoint 1", "step 2")), (0.1, succeed)]
    kube = scenario(server.kube, script)
    outcome, logger, log_uri, _ = run_stage(server, "train", tmp_path)
    assert not isinstance(outcome, StageFailed), outcome
    assert jobsets_created(kube) == 1 and outcome.submissions == 1
    kept = Path(log_uri.removeprefix("file://")).read_text()
    assert "saved checkpoint 1" in kept and "restored checkpoint 1" in kept
    assert any("evicted by Kueue" in line and "re-queued" in line for line in logger.lines)
    assert_no_canary(kube, logger, log_uri, outcome)


def test_a_failed_preempted_jobset_is_resubmitted(server: FakeApiServer,
                                                  tmp_path: Path) -> None:
    first = [(0.1, admit), (0.05, start), (0.05, say("step 1", "saved checkpoint 1")),
             (0.1, disrupt_and_fail)]
    second = [(0.1, admit), (0.05, start), (0.05, say("restored checkpoint 1", "step 2")),
              (0.1, succeed)]
    kube = scenario(server.kube, first, second)
    outcome, logger, log_uri, backend = run_stage(server, "train", tmp_path)
    assert not isinstance(outcome, StageFailed), outcome
    assert jobsets_created(kube) == 2 and len(set(backend.submitted)) == 1
    assert outcome.submissions == 2
    # reported: one preemption, and the chips the preempted attempt held (32 for its wall)
    assert outcome.preemptions == 1 and 0 < outcome.preempted_chip_hours < 32 * 60 / 3600
    kept = Path(log_uri.removeprefix("file://")).read_text()
    assert "preempted; resubmitting" in kept and "restored checkpoint 1" in kept
    assert_no_canary(kube, logger, log_uri, outcome)


def test_jobsets_per_stage_are_bounded_across_retries(server: FakeApiServer,
                                                      tmp_path: Path) -> None:
    """Every submission preempted, three task attempts (Prefect's retries): at most
    preemptions + 1 JobSets in all, not that many per attempt."""
    failing = [(0.1, admit), (0.05, start), (0.1, disrupt_and_fail)]
    kube = scenario(server.kube, *[failing] * 9)
    budgets = Budgets(**{**BUDGETS.__dict__, "preemptions": 1})
    outcomes = [run_stage(server, "train", tmp_path, budgets)[0] for _ in range(3)]
    assert all(isinstance(o, StageFailed) for o in outcomes)
    assert jobsets_created(kube) == 2
    last = outcomes[-1].diagnosis
    assert last.code == "gke/submission-budget" and not last.retryable
    assert "kubectl delete jobset" in last.fix


def test_a_jobset_an_operator_deleted_is_not_resubmitted(server: FakeApiServer,
                                                         tmp_path: Path) -> None:
    """A `kubectl delete jobset` mid-run is a cancel, not retryable infrastructure, so
    Prefect's retry never recreates what an operator stopped on purpose."""
    kube = scenario(server.kube, [(0.1, admit), (0.05, start), (0.05, say("step 1")),
                                  (0.2, operator_deletes)])
    outcome, logger, log_uri, _ = run_stage(server, "train", tmp_path)
    assert isinstance(outcome, StageFailed), outcome
    d = outcome.diagnosis
    assert d.category is FailureCategory.CANCELLED and not d.retryable
    assert d.code == "gke/deleted-by-operator" and "deleted" in d.summary
    assert "UTC" in d.summary  # when it was deleted
    assert "audit" in d.fix.lower()  # who did it: the API keeps that in audit logs
    assert jobsets_created(kube) == 1
    assert_no_canary(kube, logger, log_uri, outcome)


def test_watch_dropped_every_few_events(server: FakeApiServer, tmp_path: Path) -> None:
    server.kube.drop_watch_every = 2
    server.kube.drop_log_every = 2
    lines = [say(f"step {i}") for i in range(1, 7)]
    script = [(0.1, admit), (0.05, start), *[(0.05, a) for a in lines], (0.2, succeed)]
    kube = scenario(server.kube, script)
    outcome, _, log_uri, _ = run_stage(server, "train", tmp_path)
    assert not isinstance(outcome, StageFailed), outcome
    kept = Path(log_uri.removeprefix("file://")).read_text().splitlines()
    steps = [line for line in kept if line.startswith("step ")]
    assert steps == [f"step {i}" for i in range(1, 7)]  # none lost, none repeated
    assert jobsets_created(kube) == 1


def test_a_burst_of_503s_is_ridden_out(server: FakeApiServer, tmp_path: Path) -> None:
    def burst(k: FakeKube, name: str) -> None:
        k.fail_next(6)

    script = [(0.1, admit), (0.05, start), (0.05, burst), (0.05, say("step 1")),
              (0.5, succeed)]
    server.kube.fail_next(2)  # the very first calls (Secret, create) fail too
    kube = scenario(server.kube, script)
    outcome, logger, _, _ = run_stage(server, "train", tmp_path)
    assert not isinstance(outcome, StageFailed), outcome
    assert jobsets_created(kube) == 1
    assert any("503" in line for line in logger.lines)


def test_a_control_plane_that_stays_down_is_infrastructure(server: FakeApiServer,
                                                           tmp_path: Path) -> None:
    server.kube.fail_next(10_000)  # never answers: the first call gives up at api_s (3 s)
    began = time.monotonic()
    outcome, logger, _, _ = run_stage(server, "convert", tmp_path)
    # given up at api_s, not at a 30 s budget (the margin rides out a loaded CI machine)
    assert time.monotonic() - began < BUDGETS.api_s + 5
    assert isinstance(outcome, StageFailed)
    assert outcome.diagnosis.category is FailureCategory.INFRASTRUCTURE and \
        outcome.diagnosis.retryable
    assert "kept failing" in outcome.diagnosis.summary and "HTTP 503" in outcome.diagnosis.detail
    retries = [line for line in logger.lines if "retry " in line]
    assert len(retries) >= 3 and all("HTTP 503" in line and "unable to handle" in line for line in retries)
    assert len(set(retries)) == len(retries)  # each retry logged once


def test_a_refused_call_is_not_retried_and_is_the_users(server: FakeApiServer,
                                                         tmp_path: Path) -> None:
    server.kube.fail_next(1, status=403)
    outcome, logger, _, _ = run_stage(server, "convert", tmp_path)
    assert isinstance(outcome, StageFailed)
    assert outcome.diagnosis.category is FailureCategory.USER_ERROR
    assert outcome.diagnosis.code == FORBIDDEN_CODE
    assert "HTTP 403" in outcome.diagnosis.summary
    assert not any("retry " in line for line in logger.lines)


def test_watch_relists_after_410_gone(server: FakeApiServer, tmp_path: Path) -> None:
    def compact_and_cut(k: FakeKube, name: str) -> None:
        k.compact()  # every resourceVersion the watches hold is now too old
        k.cut_watches()

    script = [(0.1, admit), (0.05, start), (0.05, compact_and_cut), (0.05, say("step 1")),
              (0.3, succeed)]
    scenario(server.kube, script)
    outcome, _, _, backend = run_stage(server, "train", tmp_path)
    assert not isinstance(outcome, StageFailed), outcome
    assert backend.monitor is not None
    assert sum(w.relists for w in backend.monitor.watches) > 3  # 3 initial lists + relists


def test_queued_beyond_budget_is_a_queue_timeout(server: FakeApiServer, tmp_path: Path) -> None:
    kube = scenario(server.kube, [])  # Kueue never admits it
    # 3 s: the fake Kueue's Workload, whose condition the reason is read from, must exist
    # before the budget ends (1 s was once too few on a 2-core machine under CI's load)
    budgets = Budgets(**{**BUDGETS.__dict__, "queue_s": 3.0})
    outcome, logger, log_uri, _ = run_stage(server, "convert", tmp_path, budgets)
    assert isinstance(outcome, StageFailed)
    assert outcome.diagnosis.category is FailureCategory.QUEUE_TIMEOUT
    assert "insufficient quota" in outcome.diagnosis.summary
    assert no_jobsets_left(kube)  # gave up cleanly: no JobSet left in the queue
    assert_no_canary(kube, logger, log_uri, outcome)


def test_oomkilled_is_a_user_error_with_the_log_tail(server: FakeApiServer,
                                                     tmp_path: Path) -> None:
    script = [(0.1, admit), (0.05, start), (0.05, say("loading shards", f"with {CANARY}")),
              (0.1, exit_with(137, "OOMKilled"))]
    kube = scenario(server.kube, script)
    outcome, logger, log_uri, _ = run_stage(server, "convert", tmp_path)
    assert isinstance(outcome, StageFailed)
    assert outcome.diagnosis.category is FailureCategory.USER_ERROR
    assert "OOMKilled" in outcome.diagnosis.summary
    assert "loading shards" in outcome.diagnosis.detail
    assert jobsets_created(kube) == 1
    assert_no_canary(kube, logger, log_uri, outcome)


def test_image_pull_backoff_is_infrastructure(server: FakeApiServer, tmp_path: Path) -> None:
    """A pull error with no permanent cause gets the grace period, then infrastructure."""
    kube = scenario(server.kube, [(0.1, admit), (0.1, image_pull_backoff)])
    budgets = Budgets(**{**BUDGETS.__dict__, "pull_grace_s": 1.0})
    outcome, *_ = run_stage(server, "convert", tmp_path, budgets)
    assert isinstance(outcome, StageFailed)
    assert outcome.diagnosis.category is FailureCategory.INFRASTRUCTURE
    assert "ImagePullBackOff" in outcome.diagnosis.summary
    assert no_jobsets_left(kube)  # not finished: deleted, so a retry starts clean


def test_changed_configuration_under_the_same_name_is_refused(server: FakeApiServer,
                                                              tmp_path: Path) -> None:
    logger = ListLogger()
    backend = make_backend(server.url, "convert", tmp_path, logger)
    workload = convert_workload(backend.profile, Layout(backend.profile), backend.runtime)
    from flows.backends.gke.jobs.manifests import stage_run
    from flows.backends.gke.jobs.render import render_jobset

    other = render_jobset(workload, backend.profile, run=stage_run(backend.profile, "convert"),
                          stage="convert")
    other["metadata"]["annotations"]["tpurl/spec-digest"] = "0123456789abcdef"
    server.kube.create("jobsets", "default", other)
    server.kube.mutate("jobsets", "default", other["metadata"]["name"], lambda o: o.setdefault(
        "status", {}).update(conditions=[{"type": "Completed", "status": "True"}]))
    with pytest.raises(StageFailed) as info:
        backend.run_workload(workload, file_uri(tmp_path / "c.log"))
    assert "another configuration" in str(info.value)
    assert "kubectl delete jobset" in info.value.diagnosis.fix
    assert jobsets_created(server.kube) == 1


def _child(url: str, stage: str, tmp: str) -> None:
    """The flow process that gets killed: submits, then watches until SIGKILL."""
    logger = ListLogger()
    backend = make_backend(url, stage, Path(tmp), logger)
    workload = train_workload(backend.profile, Layout(backend.profile), backend.runtime)
    backend.run_workload(workload, file_uri(Path(tmp) / "child.log"))


def test_killed_flow_process_rerun_reattaches(server: FakeApiServer, tmp_path: Path) -> None:
    script = [(0.1, admit), (0.05, start), (0.05, say("step 1")), (2.5, say("step 2")),
              (0.2, succeed)]
    kube = scenario(server.kube, script)
    child = multiprocessing.get_context("spawn").Process(
        target=_child, args=(server.url, "train", str(tmp_path)))
    child.start()
    deadline = time.monotonic() + 300  # the spawned child imports prefect first: slow under load
    while jobsets_created(kube) == 0 and time.monotonic() < deadline and child.is_alive():
        time.sleep(0.05)
    time.sleep(0.3)
    child.kill()  # no cleanup runs: the JobSet stays, as when a flow pod is OOM-killed
    child.join()
    assert len(kube.find("jobsets")) == 1
    outcome, logger, log_uri, backend = run_stage(server, "train", tmp_path)
    assert not isinstance(outcome, StageFailed), outcome
    assert jobsets_created(kube) == 1 and backend.submitted == []
    assert any("reattaching" in line for line in logger.lines)
    assert "step 2" in Path(log_uri.removeprefix("file://")).read_text()
    assert_no_canary(kube, logger, log_uri, outcome)


def test_interrupt_deletes_the_jobset(server: FakeApiServer, tmp_path: Path) -> None:
    kube = scenario(server.kube, [(0.1, admit), (0.05, start)])

    class Interrupting(ListLogger):
        def info(self, msg: str, *args: object) -> None:
            super().info(msg, *args)
            if "is running" in self.lines[-1]:
                raise KeyboardInterrupt

    logger = Interrupting()
    backend = make_backend(server.url, "convert", tmp_path, logger)
    workload = convert_workload(backend.profile, Layout(backend.profile), backend.runtime)
    with pytest.raises(KeyboardInterrupt):
        backend.run_workload(workload, file_uri(tmp_path / "c.log"))
    assert no_jobsets_left(kube) and jobsets_created(kube) == 1


def test_missing_secret_submits_nothing(server: FakeApiServer, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_TOKEN")
    outcome, *_ = run_stage(server, "convert", tmp_path)
    assert isinstance(outcome, StageFailed)
    assert outcome.diagnosis.category is FailureCategory.USER_ERROR
    assert jobsets_created(server.kube) == 0 and server.kube.find("secrets") == []
