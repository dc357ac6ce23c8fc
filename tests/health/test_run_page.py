"""What the run page shows of the training sentinel (pure): the reward chart marks each
finding's step, moved like the rewards when the detector read the rollout's tags, and the
findings table names the command that clears a held run."""

from __future__ import annotations

import base64
import re

from flows.run.result import PipelineResult
from flows.runpage.artifacts import health_markdown
from flows.runpage.charts import metrics_chart_markdown


def _svg(markdown: str) -> str:
    data = re.search(r"base64,([A-Za-z0-9+/=]+)\)", markdown)
    assert data
    return base64.b64decode(data[1]).decode()


def _metrics(shifted: bool) -> dict[str, object]:
    """Three rollouts; with ``shifted`` the loss one step later, as Tunix logs it."""
    offset = 1 if shifted else 0
    steps = [{"step": s, "rewards/train/mean": 1.0, "rewards/train/min": 1.0,
              "rewards/train/max": 1.0} for s in range(3)]
    for s in range(3):
        row = next((r for r in steps if r["step"] == s + offset), None)
        if row is None:
            row = {"step": s + offset}
            steps.append(row)
        row["actor/train/loss"] = 0.5
    return {"steps": steps}


def test_the_chart_marks_a_finding_at_the_update_its_rollout_fed() -> None:
    finding = {"detector": "group_collapse", "step": 1, "policy": "hold"}
    plain = _svg(metrics_chart_markdown(_metrics(False), findings=[finding]) or "")
    assert "group_collapse (hold)" in plain
    shifted = _svg(metrics_chart_markdown(_metrics(True), findings=[finding]) or "")
    # rewards of rollout 1 stand at update 2: the mark moves with them
    mark = r'<line x1="([\d.]+)"[^>]*stroke-dasharray'
    # unshifted, step 1 of 0..2 is the middle; shifted, the mark stands at update 2 of 1..3,
    # the middle again (at update 1 it would be the left edge)
    assert re.findall(mark, shifted) == re.findall(mark, plain) != []
    assert _svg(metrics_chart_markdown(_metrics(True)) or "").count("stroke-dasharray") == 0


def test_the_findings_table_names_the_clear_command_when_held() -> None:
    result = PipelineResult(
        profile="rehearsal", backend="local", artifacts={}, stages=[], chip_hours=0.0,
        metrics={}, wall_s=1.0, started_at="", finished_at="",
        evaluation={"decision": {"held": True}},
        health=[{"detector": "length_drift", "step": 7, "policy": "hold",
                 "summary": "length | up"}])
    text = health_markdown(result)
    assert "| length\\_drift | 7 | hold | length \\| up |" in text
    assert "tpurl promote rehearsal --clear" in text
