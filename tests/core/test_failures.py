"""The one failure vocabulary: categories, the StageFailed builders, and what the flow does
with an exception nobody diagnosed (an internal error, traceback kept, never retried)."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from flows import pipeline
from flows.config import load_profile
from flows.core.failures import (
    RETRYABLE,
    FailureCategory,
    StageFailed,
    infrastructure,
    internal_error,
    user_error,
)


def test_internal_is_a_stable_category_that_is_never_retried():
    assert FailureCategory.INTERNAL.value == "internal-error"
    assert FailureCategory.INTERNAL not in RETRYABLE


def test_builders_take_no_free_form_category():
    user = user_error("convert", "no such checkpoint", "    gs://b/x", "fix model.path")
    infra = infrastructure("infra", "GCS did not answer", "    503", "retried", code="infra/gcs")
    assert (user.stage, user.diagnosis.category, user.diagnosis.retryable) == \
        ("convert", FailureCategory.USER_ERROR, False)
    assert (infra.diagnosis.category, infra.diagnosis.retryable, infra.diagnosis.code) == \
        (FailureCategory.INFRASTRUCTURE, True, "infra/gcs")
    assert str(user).startswith("stage convert: [user-error] no such checkpoint")
    assert "[infrastructure] GCS did not answer" in str(infra)


def _raise_deep() -> None:
    raise KeyError("scratch['image'] is missing (token hf_secret)")


def test_internal_error_keeps_the_traceback_and_redacts():
    try:
        _raise_deep()
    except KeyError as exc:
        failure = internal_error("train", exc, lambda s: s.replace("hf_secret", "***"))
    d = failure.diagnosis
    assert d.category is FailureCategory.INTERNAL and not d.retryable
    assert d.summary == "internal error: KeyError: \"scratch['image'] is missing (token ***)\""
    assert d.detail.startswith("Traceback (most recent call last):")
    assert "_raise_deep" in d.detail and "hf_secret" not in d.detail
    assert "bug of the pipeline" in d.fix


class _Stage:
    """Stands in for a stage: fails the way it is told, and counts its attempts."""

    def __init__(self, error: Exception) -> None:
        self.error, self.calls = error, 0

    def execute(self, ctx: Any, upstream: dict[str, Any]) -> Any:
        self.calls += 1
        raise self.error


Emitted = list[tuple[str, dict[str, Any]]]


def _run_stage(stage: _Stage, monkeypatch: pytest.MonkeyPatch) -> tuple[StageFailed, Emitted]:
    """``pipeline._execute`` for the image stage, in a real flow and task with the pipeline's
    own task options (retry condition included), retries without delay."""
    from prefect import flow, task

    monkeypatch.setitem(pipeline.STAGE_BY_NAME, "image", stage)
    emitted: Emitted = []
    monkeypatch.setattr(pipeline.events, "stage_event",
                        lambda status, profile, name, redactor, payload=None:
                        emitted.append((status, payload or {})))
    profile = load_profile("rehearsal", {}, {})
    options = {**pipeline._TASK_OPTIONS, "retry_delay_seconds": 0}

    @task(**options)
    def image_task() -> Any:
        return pipeline._execute("image", profile, {})

    @flow
    def one_stage() -> Any:
        return image_task()

    with pytest.raises(StageFailed) as caught:
        one_stage()
    return caught.value, emitted


def test_an_unexpected_exception_is_an_internal_error_not_retried(
        prefect_api, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture):
    stage = _Stage(AttributeError("'NoneType' object has no attribute 'uris'"))
    with caplog.at_level(logging.ERROR):
        failure, emitted = _run_stage(stage, monkeypatch)
    assert stage.calls == 1  # not retried
    d = failure.diagnosis
    assert failure.stage == "image" and d.category is FailureCategory.INTERNAL
    assert d.summary == "internal error: AttributeError: 'NoneType' object has no attribute 'uris'"
    assert "Traceback (most recent call last):" in d.detail and "in execute" in d.detail
    assert isinstance(failure.__cause__, AttributeError)
    failed = [payload for status, payload in emitted if status == "failed"]
    assert failed == [{"category": "internal-error", "code": "", "summary": d.summary,
                       "fix": d.fix, "log": ""}]  # every failed event's keys
    logged = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert any("internal error" in m and "Traceback" in m for m in logged), logged


def test_a_diagnosed_infrastructure_fault_is_retried_by_the_same_condition(
        prefect_api, monkeypatch: pytest.MonkeyPatch):
    stage = _Stage(infrastructure("image", "registry kept failing", "    503", "retried"))
    failure, _ = _run_stage(stage, monkeypatch)
    assert stage.calls == 3  # the first attempt and both retries
    assert failure.diagnosis.category is FailureCategory.INFRASTRUCTURE


def test_the_failed_event_carries_the_diagnosis_code_as_a_field(prefect_api, monkeypatch):
    """Automations match one cause on ``code``, not on words of the summary."""
    stage = _Stage(user_error("image", "patch 3 no longer applies", "    hunk #1 FAILED",
                              "update the patch", code="image/patch-mismatch"))
    _, emitted = _run_stage(stage, monkeypatch)
    (failed,) = [payload for status, payload in emitted if status == "failed"]
    assert failed["code"] == "image/patch-mismatch"
    assert (failed["category"], failed["summary"]) == ("user-error", "patch 3 no longer applies")



def test_the_code_is_a_field_shown_beside_the_summary_never_inside_it():
    """The failed result's text and the CLI's one message show the code; the summary stays
    the sentence a user reads."""
    from flows.console.output import render

    failed = user_error("image", "patch 3 no longer applies", "    hunk #1 FAILED",
                        "update the patch", code="image/patch-mismatch")
    assert failed.diagnosis.summary == "patch 3 no longer applies"
    assert "\n  code: image/patch-mismatch\n" in str(failed)
    first = render(failed, None).splitlines()[0]
    assert first == "[user-error image/patch-mismatch] stage image: patch 3 no longer applies"
    plain = user_error("image", "no patches", "    -", "add one")
    assert "code:" not in str(plain) and render(plain, None).startswith("[user-error] stage")
