"""Diagnosis is a pure function of what was observed."""

from __future__ import annotations

import signal

from flows.core.failures import FailureCategory, diagnose_exit

TRACEBACK = ["Traceback (most recent call last):", '  File "x.py", line 1, in <module>',
             "ValueError: num_generations must be > 1"]


def test_python_traceback_is_a_user_error_with_the_exception_as_summary():
    d = diagnose_exit("train-grpo", 1, TRACEBACK)
    assert d.category is FailureCategory.USER_ERROR and not d.retryable
    assert "ValueError: num_generations must be > 1" in d.summary
    assert "ValueError" in d.detail


def test_infrastructure_errors_are_retryable():
    tail = ["Traceback (most recent call last):",
            "google.api_core.exceptions.ServiceUnavailable: 503 GET https://storage..."]
    d = diagnose_exit("convert", 1, tail)
    assert d.category is FailureCategory.INFRASTRUCTURE and d.retryable


def test_sigkill_is_out_of_memory_and_not_retried():
    d = diagnose_exit("train", -signal.SIGKILL, ["step 1"])
    assert d.category is FailureCategory.USER_ERROR
    assert "out-of-memory" in d.summary


def test_sigterm_from_outside_is_retryable():
    d = diagnose_exit("train", -signal.SIGTERM, [])
    assert d.retryable and "SIGTERM" in d.summary


def test_timeout_is_a_stall():
    d = diagnose_exit("train", -signal.SIGTERM, ["step 3"], timed_out=True, timeout_s=60)
    assert d.category is FailureCategory.STALLED and not d.retryable
    assert "60 s" in d.summary


def test_plain_nonzero_exit_without_traceback():
    d = diagnose_exit("make-dataset", 3, ["usage: ..."])
    assert d.category is FailureCategory.USER_ERROR and "code 3" in d.summary


def test_categories_are_stable_strings():
    assert [c.value for c in FailureCategory] == ["preempted", "infrastructure", "queue-timeout",
                                                  "stalled", "user-error", "internal-error",
                                                  "budget", "cancelled"]
