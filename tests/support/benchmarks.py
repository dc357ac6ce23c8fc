"""A benchmark's quick run (benchmarks/*.py with its smallest inputs), as a test runs it: a
process of its own from the repository root, whose exit code says whether what it measures
happened (each benchmark checks its own outcome) and whose output holds its figures' lines.
Speeds are never asserted: on shared cores they say nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping

from flows.common.paths import REPO_ROOT


def run_quick(name: str, *args: str, env: Mapping[str, str] | None = None,
              timeout: float = 900) -> str:
    """Runs ``python -m benchmarks.NAME ARGS...``; fails the test on a non-zero exit with the
    output's end; returns its stdout."""
    environ = {**(os.environ if env is None else env), "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run([sys.executable, "-m", f"benchmarks.{name}", *args], cwd=REPO_ROOT,
                          env=environ, capture_output=True, text=True, timeout=timeout,
                          check=False)
    assert done.returncode == 0, (f"benchmarks/{name}.py {' '.join(args)} exited "
                                  f"{done.returncode}:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}")
    return done.stdout


def assert_figures(out: str, *starts: str) -> None:
    """Each of ``starts`` begins a line of ``out`` (after its indentation)."""
    lines = [line.strip() for line in out.splitlines()]
    missing = [s for s in starts if not any(line.startswith(s) for line in lines)]
    assert not missing, f"no line starting {missing} in:\n{out[-4000:]}"
