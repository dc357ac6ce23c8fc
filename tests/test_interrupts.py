"""Stopping a run: Ctrl-C (to the whole process group, as a terminal sends it), SIGTERM, and
SIGKILL, against real processes: a real Prefect API server, a real flow holding the lock,
a real child program (tests/support/interrupt_probe.py). Nothing may keep running.
Each wait is on a condition with a generous bound: the probe starts its own Prefect API
(minutes on a loaded 2-core machine), and the module runs beside the CPU-bound tiers."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from flows.common.paths import REPO_ROOT

pytestmark = [pytest.mark.services, pytest.mark.realtime]  # the probe's own Prefect API


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as handle:  # a zombie is dead, just not reaped
        return handle.read().rsplit(")", 1)[-1].split()[0] != "Z"


@pytest.fixture
def probes() -> Iterator[list[subprocess.Popen[str]]]:
    """The probes a test started: one still running afterwards (the test failed) is killed
    with its session, so a failure leaves no probe, API server or child behind."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)


def _start(tmp_path: Path, probes: list[subprocess.Popen[str]]
           ) -> tuple[subprocess.Popen[str], int, int, list[str], threading.Thread]:
    """The probe in a session of its own (it is the terminal's foreground group here), with
    SIGINT ignored on entry as a background shell would leave it: the CLI must not care.
    The child is found the way the next run would find it: by its tag beside the log."""
    # its own PREFECT_HOME: the private API's database (and the probe's profile lock in it)
    # is this test's, never shared with another run on the machine (a stale holder there
    # would make the probe wait)
    env = {**os.environ, "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
           "PREFECT_HOME": str(tmp_path / "prefect-home")}
    env.pop("PREFECT_API_URL", None)
    proc = subprocess.Popen([sys.executable, "-m", "tests.support.interrupt_probe", str(tmp_path)],
                            cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    probes.append(proc)
    lines: list[str] = []
    assert proc.stdout is not None
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    tag_file = tmp_path / "tpurl-logs" / "probe.pid"
    deadline = time.monotonic() + 600
    while not (tag_file.is_file() and tag_file.read_text() and
               any(line.startswith("SERVER ") for line in lines)):
        assert proc.poll() is None, "".join(lines)[-3000:]
        assert time.monotonic() < deadline, "the probe did not start its child"
        time.sleep(0.2)
    child = json.loads(tag_file.read_text())["pid"]
    port = next(m.group(1) for line in lines
                if (m := re.search(r"SERVER http://127\.0\.0\.1:(\d+)", line)))
    return proc, child, _server_pid(int(port)), lines, reader


def _server_pid(port: int) -> int:
    out = subprocess.run(["ps", "-eww", "-o", "pid,args"], capture_output=True, text=True).stdout
    pids = [int(line.split()[0]) for line in out.splitlines()
            if "uvicorn" in line and f"--port {port}" in line]
    assert pids, f"no API server on port {port}"
    return pids[0]


def _gone_within(pids: list[int], seconds: float) -> float:
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        if not any(_alive(p) for p in pids):
            return time.monotonic() - started
        time.sleep(0.1)
    raise AssertionError(f"still running after {seconds} s: "
                         f"{[p for p in pids if _alive(p)]}")


@pytest.mark.parametrize(("how", "code"), [("ctrl-c", 130), ("sigterm", 143)])
def test_one_signal_stops_everything_and_exits(tmp_path: Path, how: str, code: int,
                                               probes: list[subprocess.Popen[str]]) -> None:
    proc, child, server, lines, reader = _start(tmp_path, probes)
    if how == "ctrl-c":
        os.killpg(proc.pid, signal.SIGINT)  # the whole foreground group, like a terminal
    else:
        os.kill(proc.pid, signal.SIGTERM)
    proc.wait(timeout=120)
    reader.join(60)  # it drains the last lines (EOF once nothing holds the pipe)
    rest = "".join(lines)
    assert proc.returncode == code, rest[-3000:]
    _gone_within([child, server], 60)
    assert "INTERRUPTED" in rest
    assert "Crashed" in rest or "aborted" in rest  # Prefect recorded the end of the run
    assert not (tmp_path / "tpurl-logs" / "probe.pid").exists()


def test_sigkill_of_the_run_leaves_no_child_and_no_server(
        tmp_path: Path, probes: list[subprocess.Popen[str]]) -> None:
    proc, child, server, _, _ = _start(tmp_path, probes)
    proc.kill()
    proc.wait(timeout=30)
    _gone_within([child, server], 60)  # PR_SET_PDEATHSIG: the kernel stops both
