"""The quick runs of the benchmarks that start Prefect APIs, `tpurl run`s and the fake
Kubernetes API (tests/test_benchmarks.py lists where every benchmark's runs): each in a
process of its own, as a user runs it, exit 0 (the benchmark checks its own outcome) and its
figures printed. They mostly wait (servers starting, the watch's windows, the burst
settling), so the module is a `realtime` one; those that only need an API use the session's
(``--api``), not a server of their own."""

from __future__ import annotations

import os
from unittest import mock

import pytest

from tests.support.benchmarks import assert_figures, run_quick, run_quick_together

pytestmark = [pytest.mark.services, pytest.mark.realtime]


def _api_url() -> str:
    from prefect.settings import PREFECT_API_URL

    return str(PREFECT_API_URL.value())


def test_run_hops_walks_both_backends(prefect_api) -> None:
    out = run_quick("run_hops", "--api", _api_url())
    assert_figures(out, "local: `tpurl run` exit 0", "gke: `tpurl run` exit 0",
                   "hops (entry → stage's backend call → result kept → result shown):")


def test_lock_events_are_counted(prefect_api) -> None:
    out = run_quick("lock_events", "--quick", "--api", _api_url())
    assert_figures(out, "held 3 s:")


def test_run_events_are_the_runs_own(prefect_api) -> None:
    out = run_quick("run_events", "--quick", "--api", _api_url())
    assert_figures(out, "flow run ", "pipeline:", "run state:")


def test_rerun_overhead_finds_the_kept_server() -> None:
    out = run_quick("rerun_overhead", "--quick")
    assert_figures(out, "tpurl validate rehearsal (process): wall",
                   "tpurl run's start: server boots while the flow imports:",
                   "tpurl run's start, kept server, first", "tpurl run's start, kept server, second")


def test_rehearsal_rerun_skips_every_stage(prefect_api, tmp_path) -> None:
    out = run_quick("rehearsal", "--quick", "--keep", str(tmp_path / "root"),
                    env={**os.environ, "PREFECT_API_URL": _api_url()})
    assert_figures(out, "flow wall (inside the flow):", "overhead ratio (flow ÷ programs):",
                   "unchanged rerun:")


def test_gke_watch_cases_end_in_their_verdicts() -> None:
    """Every case of the quick run: the faults in one process, the slice counts then the
    races in another beside it (each case waits out its windows; one after the other, 131 s;
    the faults' windows are about as long as the others' together, and a process of its own
    imports the backend again, 2 CPU-s)."""
    with mock.patch.dict(os.environ):  # the module sets a stand-in HF_TOKEN for its runs
        from benchmarks.gke_watch import CASES, RACES, SLICES

    out = run_quick_together("gke_watch", [["--quick", "--only", ",".join(group)]
                                           for group in (CASES, SLICES + RACES)])
    assert_figures(out, "steady", "503-burst", "spot-reclaim", "stockout", "slices-16")


def test_announcement_burst_coalesces() -> None:
    out = run_quick("announcement_burst", "--quick")
    assert_figures(out, "retrain runs created", "goal: one retrain run created: met")
