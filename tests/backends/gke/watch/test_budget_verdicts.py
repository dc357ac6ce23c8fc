"""The two verdicts the monitor gives when a budget runs out, in-process: a run past its
budget is stalled (not retried: the same job would hang again), an API that never answered
usably is an infrastructure fault (retried). The services tier reaches them through the fake
API server (test_faults.py); these pin their words and categories without one."""

from __future__ import annotations

from flows.backends.gke.watch.monitor_verdicts import api_down, duration, stalled
from flows.backends.gke.watch.verdict import Phase
from flows.core.failures import FailureCategory


def test_a_run_past_its_budget_is_stalled_with_the_log_tail():
    tail = [f"line {i}" for i in range(40)]
    verdict = stalled("rl-abc-train", 7200.0, tail)
    d = verdict.diagnosis
    assert verdict.phase is Phase.FAILED and d is not None
    assert d.category is FailureCategory.STALLED and not d.retryable
    assert d.summary == "rl-abc-train ran longer than its budget of 2.0 h"
    assert d.detail.splitlines() == [f"    line {i}" for i in range(10, 40)]  # the last 30
    assert "gke.run_budget_s" in d.fix


def test_an_api_that_never_answered_is_an_infrastructure_fault_retried():
    verdict = api_down("rl-abc-train", 900.0, "jobsets: HTTP 503 Service Unavailable")
    d = verdict.diagnosis
    assert verdict.phase is Phase.FAILED and d is not None
    assert d.category is FailureCategory.INFRASTRUCTURE and d.retryable
    assert "900 s" in d.summary and "HTTP 503" in d.summary
    assert d.detail == "    last error: jobsets: HTTP 503 Service Unavailable"


def test_a_budget_reads_in_the_unit_a_person_would_use():
    assert [duration(s) for s in (7200.0, 5400.0, 2700.0, 60.0, 5.0)] == \
        ["2.0 h", "1.5 h", "45 min", "1 min", "5 s"]
    assert stalled("j", 5.0, []).diagnosis.summary == "j ran longer than its budget of 5 s"
