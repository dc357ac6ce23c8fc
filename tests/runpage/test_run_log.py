"""The run page's Logs tab for a failure: a diagnosed one once, readable, without traceback;
an internal error with its traceback; a retry as Prefect's own retry. The real flow (its
stages stood in) on a real Prefect API; the logs read back as the UI reads them."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import FlowRunFilter, LogFilter, LogFilterFlowRunId

from flows import pipeline
from flows.core.failures import StageFailed, infrastructure, user_error
from flows.core.stage import StageOutput
from flows.flow_runs.run_log import ReadableFailures
from tests.support.prefect_server import wait_until

NO_EVAL = {"eval": "", "promotion": "", "watch": ""}
FLOW_FAILED = "Flow run encountered an exception"  # in a failed run's last line


class FailingStage:
    """Raises ``errors`` in turn (the last one again once they run out), then succeeds when
    ``then_succeed``."""

    def __init__(self, name: str, errors: list[Exception], then_succeed: bool = False) -> None:
        self.name, self.errors, self.then_succeed, self.calls = name, errors, then_succeed, 0

    def execute(self, ctx: Any, upstream: Any) -> StageOutput:
        self.calls += 1
        if self.calls <= len(self.errors) or not self.then_succeed:
            raise self.errors[min(self.calls, len(self.errors)) - 1]
        return StageOutput(stage=self.name, status="ran", key="k", fingerprint="f",
                           uris={"image": "x"}, duration_s=0.1)


def _logs(run_id: UUID, until: str) -> list[str]:
    """The run's log lines (its tasks' included) once a "Finished in state" line says
    ``until``."""
    def read() -> list[str] | None:
        with get_client(sync_client=True) as client:
            found = [e.message for e in client.read_logs(log_filter=LogFilter(
                flow_run_id=LogFilterFlowRunId(any_=[run_id])))]
        return found if any(m.startswith("Finished in state") and until in m
                            for m in found) else None

    return wait_until(read, 120, f"{until!r} in the run's log")


def _run(tmp_path: Path) -> Any:
    return pipeline.rl_post_training(profile="rehearsal", overrides={
        "local.root": str(tmp_path / "root"), **NO_EVAL}, return_state=True)


def test_a_diagnosed_stage_failure_is_one_readable_message(
        prefect_api: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    stage = FailingStage("image", [user_error(
        "image", "patch 3 no longer applies", "    hunk #1 FAILED", "update the patch",
        code="image/patch-mismatch")])
    monkeypatch.setitem(pipeline.STAGE_BY_NAME, "image", stage)
    state = _run(tmp_path)
    assert state.is_failed() and stage.calls == 1  # a user error: no retry
    logs = _logs(state.state_details.flow_run_id, FLOW_FAILED)
    assert not [m for m in logs if "Traceback" in m], logs
    assert not [m for m in logs if "\\n" in m], logs  # no repr of a many-line message
    told = [m for m in logs if "fix: update the patch" in m]
    assert len(told) == 1, logs  # the task's failure; the flow's re-raise is not repeated
    assert told[0].startswith("[user-error image/patch-mismatch] stage image: patch 3 no "
                              "longer applies\n") and "  fix: update the patch" in told[0]
    assert not [m for m in logs if m.startswith("Encountered exception")], logs


def test_the_next_run_failing_the_same_way_in_the_same_process_still_says_it(
        prefect_api: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A `serve` process (or a worker's in-process run) runs many flows: the filter's memory
    of what it showed is per flow run, so the second run's log has its own diagnosis."""
    for attempt in ("first", "second"):
        stage = FailingStage("image", [user_error(
            "image", "patch 7 no longer applies", "    hunk #2 FAILED", "refresh patch 7",
            code="image/patch-mismatch")])
        monkeypatch.setitem(pipeline.STAGE_BY_NAME, "image", stage)
        state = _run(tmp_path / attempt)
        logs = _logs(state.state_details.flow_run_id, FLOW_FAILED)
        told = [m for m in logs if "fix: refresh patch 7" in m]
        assert len(told) == 1, (attempt, logs)


def test_an_internal_error_keeps_its_traceback(
        prefect_api: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    stage = FailingStage("image", [KeyError("uris")])
    monkeypatch.setitem(pipeline.STAGE_BY_NAME, "image", stage)
    state = _run(tmp_path)
    assert state.is_failed()
    logs = _logs(state.state_details.flow_run_id, FLOW_FAILED)
    assert [m for m in logs if "Traceback (most recent call last)" in m], logs


def test_a_retried_fault_shows_as_prefect_retries_with_a_one_line_reason(
        prefect_api: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    stage = FailingStage("image", [infrastructure(
        "image", "registry answered 503", "    503 Service Unavailable\n    retry later",
        "retried automatically")], then_succeed=True)
    monkeypatch.setitem(pipeline.STAGE_BY_NAME, "image", stage)
    monkeypatch.setattr(pipeline, "build_image",
                        pipeline.build_image.with_options(retry_delay_seconds=0))
    failed_later = FailingStage("infra", [user_error("infra", "stop here", "", "none")])
    monkeypatch.setitem(pipeline.STAGE_BY_NAME, "infra", failed_later)
    state = _run(tmp_path)
    assert state.is_failed() and stage.calls == 2
    run_id = state.state_details.flow_run_id
    logs = _logs(run_id, FLOW_FAILED)
    (retry,) = [m for m in logs if "Retry 1/2 will start" in m]
    assert "[infrastructure] stage image: registry answered 503 - Retry 1/2" in retry, retry
    assert "\\n" not in retry and "Traceback" not in retry
    with get_client(sync_client=True) as client:
        (image,) = [t for t in client.read_task_runs(flow_run_filter=FlowRunFilter(
            id={"any_": [run_id]})) if t.name.startswith("image")]
        history = [s.name for s in client.read_task_run_states(image.id)]
    # delay 0 is Prefect's Retrying state; with the shipped delays it is AwaitingRetry
    # (prefect/task_engine.py handle_retry): a retry of the same task run either way
    assert "Retrying" in history and history[-1] == "Completed", history
    assert image.run_count == 2


def test_the_filter_leaves_the_record_the_other_handlers_see_unchanged():
    """Python 3.12: a LogRecord a handler's filter returns replaces the record for that
    handler only (logging/__init__.py ``Handler.handle``)."""
    failure = user_error("image", "patch 3 no longer applies", "    hunk", "update the patch")
    try:
        raise failure
    except StageFailed:
        import sys

        record = logging.LogRecord("prefect.task_runs", logging.ERROR, __file__, 1,
                                   "Task run failed with exception: %r", (failure,),
                                   sys.exc_info())
    shown = ReadableFailures().filter(record)
    assert isinstance(shown, logging.LogRecord) and shown is not record
    assert shown.exc_info is None and shown.getMessage().startswith("[user-error] stage image")
    assert record.exc_info is not None and record.getMessage().startswith("Task run failed")


def test_a_teardown_of_the_shipped_deployment_says_each_missing_field_once(
        prefect_api: None, monkeypatch: pytest.MonkeyPatch):
    """As prefect.yaml ships it: the gke fields empty in the env, the run refused at validation."""
    from flows.operations.teardown import teardown_flow

    for field in ("PROJECT", "REGION", "ZONE", "CLUSTER", "BUCKET", "RESERVATION",
                  "AUTHORIZED_CIDR"):
        monkeypatch.setenv(f"TPURL_GKE__{field}", "")
    state = teardown_flow(profile="qwen3-30b-a3b-v6e-32", return_state=True)
    assert state.is_failed() and "gke.project: is required but not set" in state.message
    assert 'overrides parameter {"gke.project": "VALUE"}' in state.message  # not the CLI's
    assert "--set" not in state.message, state.message
    logs = _logs(state.state_details.flow_run_id, FLOW_FAILED)
    assert not [m for m in logs if "Traceback" in m or "\\n" in m], logs
    (told,) = [m for m in logs if "gke.project: is required" in m]
    assert told.startswith("[user-error] profile ") and told.count("\n    fix: ") == 7, told
    with get_client(sync_client=True) as client:
        run = client.read_flow_run(state.state_details.flow_run_id)
    assert run.name.startswith("teardown-qwen3-30b-a3b-v6e-32-"), run.name


def test_a_teardown_of_the_rehearsal_is_refused_naming_the_gke_profiles(prefect_api: None):
    from flows.operations.teardown import teardown_flow

    state = teardown_flow(profile="rehearsal", return_state=True)
    assert state.is_failed()
    assert "profile: uses backend local: it has no cluster to tear down" in state.message
    from flows.config.choices import gke_profile_names

    shipped = ", ".join(gke_profile_names())
    assert "qwen3-30b-a3b-v6e-32" in shipped and "rehearsal" not in shipped
    assert f"choose a GKE profile ({shipped}, or a YAML file" in state.message
    assert "AssertionError" not in state.message
