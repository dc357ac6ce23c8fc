"""Reading a PipelineResult the way the end-to-end tests compare runs."""

from __future__ import annotations

from flows.run.result import PipelineResult


def stage_statuses(result: PipelineResult) -> dict[str, str]:
    """Stage → ran / skipped, in the flow's order."""
    return {s.stage: s.status for s in result.stages}
