"""A small SVG line chart of training metrics for the run page, with no plotting library.

Pure: metrics in, SVG text out. The flow embeds it in a markdown artifact as a data URI, so
the picture travels with the run record and needs no bucket to be publicly readable.
"""

from __future__ import annotations

import base64
import math
from typing import Any

WIDTH, HEIGHT, PAD = 640, 260, 40
COLORS = ("#2563eb", "#dc2626", "#059669", "#d97706")


def series(metrics: dict[str, Any], tag: str) -> list[tuple[int, float]]:
    points = []
    for step in metrics.get("steps", []):
        value = step.get(tag)
        if isinstance(value, int | float) and math.isfinite(value):
            points.append((int(step["step"]), float(value)))
    return points


def line_chart(title: str, lines: dict[str, list[tuple[int, float]]]) -> str:
    """An SVG with one polyline per series, each scaled to its own range (labelled)."""
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
             f'font-family="sans-serif" font-size="12"><rect width="100%" height="100%" '
             f'fill="white"/><text x="{PAD}" y="20" font-size="14">{_escape(title)}</text>',
             f'<line x1="{PAD}" y1="{HEIGHT - PAD}" x2="{WIDTH - PAD}" y2="{HEIGHT - PAD}" '
             'stroke="#999"/>']
    steps = sorted({s for pts in lines.values() for s, _ in pts}) or [0]
    lo_step, hi_step = steps[0], max(steps[-1], steps[0] + 1)
    for index, (name, points) in enumerate(lines.items()):
        if not points:
            continue
        color = COLORS[index % len(COLORS)]
        values = [v for _, v in points]
        lo, hi = min(values), max(values)
        span = hi - lo or 1.0
        coords = " ".join(
            f"{PAD + (s - lo_step) / (hi_step - lo_step) * (WIDTH - 2 * PAD):.1f},"
            f"{HEIGHT - PAD - (v - lo) / span * (HEIGHT - 2 * PAD - 20):.1f}" for s, v in points)
        parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{coords}"/>')
        parts.append(f'<text x="{WIDTH - PAD - 220}" y="{40 + 16 * index}" fill="{color}">'
                     f'{_escape(name)}: {lo:.4g} … {hi:.4g}</text>')
    parts.append(f'<text x="{PAD}" y="{HEIGHT - 12}">step {lo_step} … {hi_step}</text></svg>')
    return "".join(parts)


def metrics_chart_markdown(metrics: dict[str, Any]) -> str | None:
    """Markdown with the reward/loss chart, or None when there is nothing to draw."""
    wanted = {"reward (mean)": "rewards/train/mean", "reward (max)": "rewards/train/max",
              "reward (min)": "rewards/train/min", "loss": "actor/train/loss"}
    lines = {name: series(metrics, tag) for name, tag in wanted.items()}
    lines = {name: pts for name, pts in lines.items() if pts}
    if not lines:
        return None
    svg = line_chart("GRPO training: reward and loss per step", lines)
    data = base64.b64encode(svg.encode()).decode()
    return f"![reward and loss per step](data:image/svg+xml;base64,{data})"


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
