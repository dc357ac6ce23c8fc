"""What a stage has spent on TPU time so far, charged as the watch goes, against the caps.

Why charged in the watch: the monitor already wakes every tick with the JobSet's pods in hand,
so the chip-hours held since the last tick cost no API call. Held, as in the plan
(flows/config/spend.py ``stage_chips_held``): the whole static pool on a reservation from the
watch's start; in a mode that scales from zero the stage's chips while any of its pods is bound
to a node (from scale-up to the last pod's end; the autoscaler's scale-down delay after it is
not seen here and not charged).

The run's total lives in a ledger keyed by the run (the Prefect flow run id, or one per
process outside a flow): stages run one after another in the flow's process, so the cap per
run is the sum over its stages and over resubmissions and Prefect retries of each. The clock is
a parameter, so a test moves time itself.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from flows.config.profile import Profile
from flows.config.spend import stage_chips_held
from flows.core.failures import Diagnosis, FailureCategory

Obj = dict[str, Any]
_LEDGER: dict[str, float] = {}
_LOCK = threading.Lock()


def run_key() -> str:
    """The flow run this stage belongs to ("" outside a flow: one ledger per process)."""
    try:
        from prefect.runtime import flow_run

        return str(flow_run.id or "")
    except Exception:
        return ""


def spent_in_run(key: str) -> float:
    with _LOCK:
        return _LEDGER.get(key, 0.0)


def _bound(pods: list[Obj]) -> bool:
    return any((p.get("spec") or {}).get("nodeName") and (p.get("status") or {}).get("phase")
               not in ("Succeeded", "Failed") for p in pods)


@dataclass
class SpendMeter:
    """One stage of one run: charges held chip-hours × price; ``charge`` says when a cap is
    crossed. Shared by every JobSet submission of the stage."""

    stage: str
    chips: int
    usd_per_chip_hour: float
    static_pool: bool
    run_cap: float | None
    stage_cap: float | None
    key: str = ""
    clock: Callable[[], float] = time.monotonic
    spent_usd: float = 0.0
    _last: float | None = field(default=None, repr=False)

    @property
    def run_spent_usd(self) -> float:
        return spent_in_run(self.key)

    def charge(self, pods: list[Obj]) -> Diagnosis | None:
        """Add the time since the last call at the chips held now; a diagnosis once a cap is
        crossed (the caller deletes the JobSet)."""
        now = self.clock()
        held = self.chips if (self.static_pool or _bound(pods)) else 0
        if self._last is not None and held:
            usd = held * max(now - self._last, 0.0) / 3600.0 * self.usd_per_chip_hour
            self.spent_usd += usd
            with _LOCK:
                _LEDGER[self.key] = _LEDGER.get(self.key, 0.0) + usd
        self._last = now
        return self.crossed()

    def pause(self) -> None:
        """Between submissions nothing is watched: a pool that scales from zero holds nothing
        then (the failed JobSet's pods are gone), so its next charge starts afresh; a static
        pool is billed meanwhile, so its clock keeps running."""
        if not self.static_pool:
            self._last = None

    def crossed(self) -> Diagnosis | None:
        run = self.run_spent_usd
        if self.stage_cap is not None and self.spent_usd >= self.stage_cap:
            return budget_diagnosis(self.stage, self.spent_usd, self.stage_cap,
                                    f"gke.max_usd_per_stage.{self.stage}", run)
        if self.run_cap is not None and run >= self.run_cap:
            return budget_diagnosis(self.stage, run, self.run_cap, "gke.max_usd_per_run", run)
        return None


def meter_for(profile: Profile, stage: str, clock: Callable[[], float] = time.monotonic,
              key: str | None = None) -> SpendMeter | None:
    """The stage's meter, or None when the profile sets no cap (nothing to enforce)."""
    gke = profile.gke
    if gke is None or (gke.max_usd_per_run is None and stage not in gke.max_usd_per_stage):
        return None
    return SpendMeter(stage, stage_chips_held(gke, stage), gke.usd_per_chip_hour,
                      not gke.scales_from_zero, gke.max_usd_per_run,
                      gke.max_usd_per_stage.get(stage),  # type: ignore[call-overload]
                      run_key() if key is None else key, clock)


def budget_diagnosis(stage: str, spent: float, cap: float, field_name: str,
                     run_spent: float) -> Diagnosis:
    summary = (f"stage {stage} stopped: ${spent:,.2f} of TPU time spent, cap {field_name} "
               f"${cap:,.2f}")
    return Diagnosis(
        FailureCategory.BUDGET, summary,
        f"    spent in this run so far: ${run_spent:,.2f} (held chip-hours × the capacity "
        "mode's price, as the watch saw them)",
        f"the JobSet was deleted so nothing holds the slice; checkpoints already written are "
        f"kept and the next run resumes from the newest. Raise {field_name} if the run just "
        "needs longer, or lower the work (num_batches)", code="gke/spend-cap")
