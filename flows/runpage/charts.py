"""A small SVG line chart of training metrics for the run page, with no plotting library.

Pure: metrics in, SVG text out. The flow embeds it in a markdown artifact as a data URI, so
the picture travels with the run record and needs no bucket to be publicly readable.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any

from flows.health.detectors import ROLLOUT_DETECTORS, series
from flows.runpage.alignment import per_update
from flows.runpage.metrics import logged_tags, reward_function_tag, reward_functions_logged

WIDTH, PANEL_HEIGHT, LEFT, RIGHT, TOP, BOTTOM = 640, 200, 64, 24, 28, 30
COLORS = ("#2563eb", "#dc2626", "#059669", "#d97706")
MARK_COLOR = "#7c3aed"


def ticks(lo: float, hi: float, count: int = 4) -> list[float]:
    """Evenly spaced y-axis values from lo to hi (one value when the range is a point)."""
    if hi <= lo:
        return [lo]
    return [lo + (hi - lo) * i / count for i in range(count + 1)]


def panel(title: str, lines: dict[str, list[tuple[int, float]]], top: float,
          steps: tuple[int, int], marks: Sequence[tuple[int, str]] = ()) -> list[str]:
    """One panel: its series on one shared y-axis (labelled ticks), steps on x. Series whose
    points are identical to an earlier one's are drawn once and named together."""
    merged: dict[str, list[tuple[int, float]]] = {}
    for name, points in lines.items():
        same = next((n for n, p in merged.items() if p == points), None)
        if same is None:
            merged[name] = points
        else:
            merged[f"{same} = {name}"] = merged.pop(same)
    values = [v for pts in merged.values() for _, v in pts]
    lo, hi = min(values), max(values)
    if hi == lo:
        lo, hi = lo - (abs(lo) or 1.0) * 0.1, hi + (abs(hi) or 1.0) * 0.1
    lo_step, hi_step = steps[0], max(steps[1], steps[0] + 1)
    plot_h = PANEL_HEIGHT - TOP - BOTTOM

    def x(step: float) -> float:
        return LEFT + (step - lo_step) / (hi_step - lo_step) * (WIDTH - LEFT - RIGHT)

    def y(value: float) -> float:
        return top + TOP + plot_h - (value - lo) / (hi - lo) * plot_h

    parts = [f'<text x="{LEFT}" y="{top + 18}" font-size="14">{_escape(title)}</text>',
             f'<line x1="{LEFT}" y1="{top + TOP}" x2="{LEFT}" y2="{top + TOP + plot_h}" '
             'stroke="#999"/>',
             f'<line x1="{LEFT}" y1="{top + TOP + plot_h}" x2="{WIDTH - RIGHT}" '
             f'y2="{top + TOP + plot_h}" stroke="#999"/>']
    for value in ticks(lo, hi):
        parts.append(f'<text x="{LEFT - 6}" y="{y(value) + 4:.1f}" text-anchor="end" '
                     f'fill="#555">{value:.3g}</text>')
        parts.append(f'<line x1="{LEFT}" y1="{y(value):.1f}" x2="{WIDTH - RIGHT}" '
                     f'y2="{y(value):.1f}" stroke="#eee"/>')
    for step in range(lo_step, hi_step + 1, max(1, (hi_step - lo_step) // 8)):
        parts.append(f'<text x="{x(step):.1f}" y="{top + PANEL_HEIGHT - 12}" '
                     f'text-anchor="middle" fill="#555">{step}</text>')
    for step, label in marks:  # a training-health finding, at the step it fired
        if lo_step <= step <= hi_step:
            parts.append(f'<line x1="{x(step):.1f}" y1="{top + TOP}" x2="{x(step):.1f}" '
                         f'y2="{top + TOP + plot_h}" stroke="{MARK_COLOR}" '
                         'stroke-dasharray="4 3"/>')
            parts.append(f'<text x="{x(step) + 3:.1f}" y="{top + TOP + 12}" '
                         f'fill="{MARK_COLOR}">{_escape(label)}</text>')
    for index, (name, points) in enumerate(merged.items()):
        color = COLORS[index % len(COLORS)]
        coords = " ".join(f"{x(s):.1f},{y(v):.1f}" for s, v in points)
        parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{coords}"/>')
        parts += [f'<circle cx="{x(s):.1f}" cy="{y(v):.1f}" r="3" fill="{color}"/>'
                  for s, v in points]
        legend_x = WIDTH - RIGHT - 130 * (len(merged) - 1 - index)  # one row, above the plot
        parts.append(f'<text x="{legend_x}" y="{top + 18}" text-anchor="end" '
                     f'fill="{color}">■ {_escape(name)}</text>')
    return parts


def line_chart(panels: dict[str, dict[str, list[tuple[int, float]]]],
               axis: str = "GRPO step (TensorBoard)",
               marks: Sequence[tuple[int, str]] = ()) -> str:
    """An SVG with one panel per entry (each with its own y-axis), sharing the step axis;
    ``marks`` (step, label) are drawn on the reward panels as dashed lines."""
    drawn = {t: {n: p for n, p in lines.items() if p} for t, lines in panels.items()}
    drawn = {t: lines for t, lines in drawn.items() if lines}
    steps = sorted({s for lines in drawn.values() for pts in lines.values() for s, _ in pts})
    height = PANEL_HEIGHT * len(drawn) + 20
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
             f'font-family="sans-serif" font-size="12"><rect width="100%" height="100%" '
             'fill="white"/>']
    for index, (title, lines) in enumerate(drawn.items()):
        parts += panel(title, lines, index * PANEL_HEIGHT, (steps[0], steps[-1]),
                       marks if "reward" in title else ())
    parts.append(f'<text x="{WIDTH / 2}" y="{height - 4}" text-anchor="middle" fill="#555">'
                 f'{_escape(axis)}</text></svg>')
    return "".join(parts)


def metrics_chart_markdown(metrics: dict[str, Any], functions: Sequence[str] = (),
                           findings: Sequence[dict[str, Any]] = ()) -> str | None:
    """Markdown with the reward and loss panels, or None when there is nothing to draw; with
    a panel of each reward function's mean, a series named by the function
    (``functions``: the recipe's, first), when the events hold them. The steps are the
    table's (flows/runpage/alignment.py): a rollout's rewards stand at the update they fed,
    above its loss. Each training-health finding (flows/health/sentinel.py) marks its step
    on the reward panels, moved like the rewards when its detector read the rollout's."""
    steps, shift = per_update(metrics.get("steps", []))
    marks = [(int(f["step"]) + (shift if f.get("detector") in ROLLOUT_DETECTORS else 0),
              f"{f.get('detector')} ({f.get('policy')})") for f in findings]
    rewards = {name: series(steps, f"rewards/train/{tag}")
               for name, tag in (("mean", "mean"), ("max", "max"), ("min", "min"))}
    loss = {"loss": series(steps, "actor/train/loss")}
    panels = {"reward per step": rewards}
    by_function = {name: series(steps, reward_function_tag(name))
                   for name in reward_functions_logged(logged_tags(metrics), functions)}
    if by_function:
        panels["mean reward per function per step"] = by_function
    panels["actor loss per step"] = loss
    if not any(p for lines in panels.values() for p in lines.values()):
        return None
    svg = line_chart(panels, "GRPO update (TensorBoard step of its loss; rewards are its "
                     "rollout's)" if shift else "GRPO step (TensorBoard)", marks)
    data = base64.b64encode(svg.encode()).decode()
    return f"![reward and loss per step](data:image/svg+xml;base64,{data})"


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
