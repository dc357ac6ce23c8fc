"""Line coverage per package and the functions no test executed, from a combined coverage run.

Why a list of functions, not only a percentage: a percentage of 85 hides which 15 are dead,
and a function that nothing runs is either dead code (remove it) or an untested path (test
it). ``Monitor._remember_pull_errors`` stayed unwired for weeks because nothing printed it.

Usage, after ``coverage combine``: ``python scripts/coverage_report.py [coverage-json-file]``
(without a file it asks coverage for the JSON report of the current data).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from pathlib import PurePosixPath
from typing import Any


def package_of(path: str) -> str:
    """flows/backends/gke/watch/monitor.py -> flows/backends/gke/watch."""
    return str(PurePosixPath(path).parent)


def per_package(report: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """(covered lines, statements) per package directory."""
    totals: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for path, data in report["files"].items():
        total = totals[package_of(path)]
        total[0] += data["summary"]["covered_lines"]
        total[1] += data["summary"]["num_statements"]
    return {pkg: (c, n) for pkg, (c, n) in sorted(totals.items())}


def never_executed(report: dict[str, Any]) -> list[str]:
    """``path:line name`` of every function with statements none of which ran."""
    found = []
    for path, data in sorted(report["files"].items()):
        for name, fn in data.get("functions", {}).items():
            if name and fn["summary"]["num_statements"] and not fn["summary"]["covered_lines"]:
                found.append(f"{path}:{fn['start_line']} {name}")
    return found


def render(report: dict[str, Any]) -> str:
    lines = ["line coverage per package:"]
    for pkg, (covered, statements) in per_package(report).items():
        lines.append(f"  {100 * covered / statements if statements else 100:5.1f}%  "
                     f"{covered:5d}/{statements:<5d} {pkg}")
    dead = never_executed(report)
    lines += ["", f"functions no test executed ({len(dead)}):", *(f"  {d}" for d in dead)]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if argv:
        with open(argv[0]) as f:
            report = json.load(f)
    else:
        text = subprocess.run([sys.executable, "-m", "coverage", "json", "-q", "-o", "-"],
                              check=True, capture_output=True, text=True).stdout
        report = json.loads(text)
    print(render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
