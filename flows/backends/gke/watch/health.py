"""The training sentinel while a GKE training runs: its detectors over the metrics written so
far, read from the bucket every ``every_s``; a finding whose policy is ``stop`` ends the
watch the way a spend cap does (flows/backends/gke/watch/monitor.py turns the diagnosis into
a failed verdict and the stage deletes the JobSet; checkpoints already written are kept).

Every finding is announced once, with its policy (flows/health/sentinel.py), the moment the
watch sees it; a stop's event says what it saved: the training's estimate for the steps it
did not take. The read is the run page's (flows/runpage/metrics.py ``summarize_run``), so
what the watch judged is what the page shows. A read that fails judges nothing that time and
never fails the stage: the sentinel watches, the spend cap and the deadline bound.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from flows.common.failure_codes import Failure
from flows.config.profile import Profile
from flows.core.failures import Diagnosis, FailureCategory
from flows.core.storage import Storage
from flows.health import sentinel
from flows.runpage.metrics import summarize_run

STOP_CODE = Failure.GKE_TRAINING_SUSPECT
EVERY_S = 120.0  # a GRPO step on a slice takes tens of seconds; reading every 2 min is cheap


def saved_usd(step: int, total_steps: int | None, stage_usd: float) -> float | None:
    """The training's estimate for the steps not taken (pure); None without a length."""
    if not total_steps or total_steps <= 0:
        return None
    left = max(0, total_steps - step) / total_steps
    return round(stage_usd * left, 2)


def stop_diagnosis(finding: dict[str, Any], saved: float | None) -> Diagnosis:
    """What the stage fails with when a stop-policy detector fired (pure)."""
    detector = finding["detector"]
    return Diagnosis(
        FailureCategory.USER_ERROR,
        f"stage train stopped by the training sentinel: {detector} at step "
        f"{finding['step']} ({finding['summary']})",
        "    " + (f"spend saved: about ${saved:,.2f} of the training's estimate"
                  if saved is not None else "spend saved: the steps not taken"),
        f"the JobSet was deleted so nothing holds the slice; checkpoints already written are "
        f"kept. Read the finding (the run page, the tpurl.train.suspect event, "
        f"docs/how-to/held-run.md); if the reward is fine, set health.{detector}.policy: "
        "hold (or warn) and run again: the run resumes from its newest checkpoint",
        code=STOP_CODE)


class HealthWatch:
    """Asked by the monitor every tick; reads and judges at most every ``every_s``."""

    def __init__(self, profile: Profile, storage: Storage, run_dir: str, run: str,
                 total_steps: int | None, stage_usd: float, warn: Callable[[str], None],
                 every_s: float = EVERY_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.profile, self.storage, self.run_dir, self.run = profile, storage, run_dir, run
        self.total_steps, self.stage_usd, self.warn = total_steps, stage_usd, warn
        self.every_s, self.clock = every_s, clock
        self.last: float | None = None
        self.stopped: dict[str, Any] | None = None

    def check(self) -> Diagnosis | None:
        now = self.clock()
        if self.last is not None and now - self.last < self.every_s:
            return None
        self.last = now
        try:
            steps = summarize_run(self.storage, self.run_dir)["steps"]
        except Exception as exc:  # a watch that cannot read judges nothing this time
            self.warn(f"training health: metrics not read this time ({exc})")
            return None
        judged = sentinel.after_training(steps, self.profile.health)
        stops = [f for f in judged if f["policy"] == "stop"]
        stop = stops[0] if stops else None
        saved = saved_usd(int(stop["step"]), self.total_steps, self.stage_usd) if stop else None
        sentinel.announce(self.profile.name, self.run, [f for f in judged if f is not stop],
                          self.warn)
        if stop is None:
            return None
        sentinel.announce(self.profile.name, self.run, [stop], self.warn, spend_saved=saved)
        self.stopped = stop
        return stop_diagnosis(stop, saved)
