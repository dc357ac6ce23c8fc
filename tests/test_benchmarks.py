"""Every benchmark in benchmarks/ has a quick run in the tests, so a change that breaks one
fails a test instead of rotting until someone measures again.

A quick run is the benchmark's own code path with its smallest inputs, in a process of its
own (tests/support/benchmarks.py), where the heavy part it needs already is: beside the
Prefect API of the services tests, the rehearsal module's finished run, the flow-image
test's dockerd. The benchmark checks its own outcome (its exit code is 1 when what it
measures did not happen); the test asserts that, and its figures' lines, never a speed."""

from __future__ import annotations

import re

from flows.common.paths import REPO_ROOT

# benchmark (benchmarks/NAME.py) -> the test that runs its quick run
QUICK_RUNS = {
    "announcement_burst": "tests/test_benchmarks_quick.py::test_announcement_burst_coalesces",
    "capacity_month": "tests/test_howto_figures.py::"
                      "test_the_month_page_holds_the_benchmarks_figures_for_every_mode",
    "docs_answers": "tests/test_docs_site.py::"
                    "test_the_site_builds_strictly_with_every_page_in_the_nav",
    "evaluation": "tests/e2e/test_rehearsal_e2e.py::test_the_run_s_benchmarks_read_it",
    "export": "tests/e2e/test_rehearsal_e2e.py::test_the_export_benchmark_exports_the_run",
    "flow_image": "tests/e2e/test_flow_image.py::test_the_flow_image_benchmark_builds_a_change",
    "gke_watch": "tests/test_benchmarks_quick.py::test_gke_watch_cases_end_in_their_verdicts",
    "health_detectors": "tests/health/test_benchmark.py::"
                        "test_the_detector_benchmark_catches_every_hack",
    "image_build": "tests/backends/gke/image/test_build.py::"
                   "test_the_image_benchmark_builds_then_skips",
    "lock_events": "tests/test_benchmarks_quick.py::test_lock_events_are_counted",
    "rehearsal": "tests/test_benchmarks_quick.py::test_rehearsal_rerun_skips_every_stage",
    "rerun_overhead": "tests/test_benchmarks_quick.py::test_rerun_overhead_finds_the_kept_server",
    "rollout": "tests/backends/local/test_standin_rollout.py::"
               "test_the_rollout_benchmark_decodes_both_ways",
    "run_events": "tests/test_benchmarks_quick.py::test_run_events_are_the_runs_own",
    "run_hops": "tests/test_benchmarks_quick.py::test_run_hops_walks_both_backends",
    "stage_profile": "tests/e2e/test_rehearsal_e2e.py::test_the_run_s_benchmarks_read_it",
    "watch": "tests/core/test_watch_decision.py::"
             "test_the_benchmark_keeps_false_alarms_within_alpha_and_catches_a_drop",
}


def test_every_benchmark_has_a_quick_run_in_a_test() -> None:
    """A new benchmark without a quick run, or a quick run whose test was renamed or no longer
    starts it, fails here."""
    names = {p.stem for p in (REPO_ROOT / "benchmarks").glob("*.py") if p.stem != "__init__"}
    assert names == set(QUICK_RUNS), (
        f"benchmarks without a quick run: {sorted(names - set(QUICK_RUNS))}; listed but gone: "
        f"{sorted(set(QUICK_RUNS) - names)}. Give the benchmark a --quick run that checks its "
        "own outcome, run it from a test where its heavy part already is, and name that test "
        "here")
    for name, where in QUICK_RUNS.items():
        path, function = where.split("::")
        source = (REPO_ROOT / path).read_text()
        assert re.search(rf"^def {function}\(", source, re.M), f"{name}: {where} is not a test"
        assert (re.search(rf'run_quick(_together)?\("{name}"', source)
                or f"benchmarks/{name}.py" in source), (
            f"{where} does not run benchmarks/{name}.py")


def test_every_benchmark_s_docstring_says_how_its_quick_run_is_run() -> None:
    for name in QUICK_RUNS:
        text = (REPO_ROOT / "benchmarks" / f"{name}.py").read_text()
        doc = text.split('"""', 2)[1]
        assert "quick" in doc, f"benchmarks/{name}.py: its docstring does not name its quick run"
