"""The flow's result: every artifact URI, per-stage status and timing, chip-hours, metrics.

Defined in an importable module (not the flow file's ``__main__``) so a persisted result
reads back as this type, not as a dict.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from flows.core.stage import StageOutput, WorkloadRun


class StageReport(BaseModel):
    stage: str
    status: str
    duration_s: float
    chip_hours: float
    uris: dict[str, str]
    workloads: list[WorkloadRun] = Field(default_factory=list)
    usd: float = 0.0  # the chip-hours held at the profile's price

    @classmethod
    def of(cls, output: StageOutput, usd_per_chip_hour: float = 0.0) -> StageReport:
        return cls(stage=output.stage, status=output.status, duration_s=output.duration_s,
                   chip_hours=output.chip_hours, uris=output.uris, workloads=output.workloads,
                   usd=round(output.chip_hours * usd_per_chip_hour, 2))


class PipelineResult(BaseModel):
    profile: str
    backend: str
    artifacts: dict[str, str]
    stages: list[StageReport]
    chip_hours: float
    usd: float = 0.0
    metrics: dict[str, Any]
    wall_s: float
    lock_wait_s: float = 0.0  # waiting for another run of the profile; not in any stage's time
    started_at: str
    finished_at: str

    @property
    def workload_wall_s(self) -> float:
        return sum(w.wall_s for s in self.stages for w in s.workloads)
