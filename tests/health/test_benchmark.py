"""The detectors' benchmark (benchmarks/health_detectors.py), its quick run: every hack
caught, the rehearsal's own reward not flagged, a line per detector. Figures, not speeds."""

from __future__ import annotations

from flows.health.detectors import DETECTORS
from tests.support.benchmarks import assert_figures, run_quick


def test_the_detector_benchmark_catches_every_hack() -> None:
    out = run_quick("health_detectors", "--quick")
    assert_figures(out, *DETECTORS, "rehearsal's own reward (recorded): 0 finding(s)")
