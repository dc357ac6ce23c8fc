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
    return run_quick_together(name, [list(args)], env=env, timeout=timeout)


def run_quick_together(name: str, runs: list[list[str]], env: Mapping[str, str] | None = None,
                       timeout: float = 900) -> str:
    """``run_quick`` for each argument list of ``runs``, the processes side by side (for a
    benchmark whose cases mostly wait out their windows: one after the other they only added
    up waits); fails the test on any non-zero exit; returns their stdouts, in ``runs``'
    order."""
    environ = {**(os.environ if env is None else env), "PYTHONPATH": str(REPO_ROOT)}
    started = [(args, subprocess.Popen([sys.executable, "-m", f"benchmarks.{name}", *args],
                                       cwd=REPO_ROOT, env=environ, stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True))
               for args in runs]
    outs = []
    for args, proc in started:
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for _, other in started:
                other.kill()
            raise
        assert proc.returncode == 0, (f"benchmarks/{name}.py {' '.join(args)} exited "
                                      f"{proc.returncode}:\n{stdout[-4000:]}\n{stderr[-4000:]}")
        outs.append(stdout)
    return "".join(outs)


def assert_figures(out: str, *starts: str) -> None:
    """Each of ``starts`` begins a line of ``out`` (after its indentation)."""
    lines = [line.strip() for line in out.splitlines()]
    missing = [s for s in starts if not any(line.startswith(s) for line in lines)]
    assert not missing, f"no line starting {missing} in:\n{out[-4000:]}"
