"""scripts/cpu_by_process.py: processes sorted into kinds by their command line, summed per
kind within a window, and a real recording that sees a busy child's CPU."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

from flows.common.paths import REPO_ROOT
from scripts.cpu_by_process import kind_of, totals
from tests.support.prefect_server import wait_until


def test_each_kind_is_named_by_its_command_line() -> None:
    venv = "/repo/.venv/bin/python"
    assert kind_of(f"{venv} -m coverage run --parallel-mode -m pytest -m x", "python") == \
        "pytest runner"
    assert kind_of("/repo/.venvs/rehearsal/bin/python /repo/images/rehearsal/train_rl_cpu.py "
                   "model_name=x", "python") == "MaxText program: train_rl_cpu.py"
    assert kind_of(f"{venv} -m uvicorn --app-dir x --factory prefect.server.api.server:"
                   "create_app --host 127.0.0.1", "python") == "Prefect server"
    assert kind_of("/repo/.venv/bin/python /repo/.venv/bin/prefect server start --port 1",
                   "prefect") == "Prefect server"
    assert kind_of("/repo/.venv/bin/python /repo/.venv/bin/prefect worker start --pool p",
                   "prefect") == "Prefect worker"
    assert kind_of("", "kdamond.0") == "other: kdamond.0"


def test_totals_count_the_processes_first_seen_in_the_window() -> None:
    records = [{"cmd": "prefect server start", "comm": "p", "first": 1.0, "cpu": 10.0},
               {"cmd": "prefect server start", "comm": "p", "first": 5.0, "cpu": 4.0},
               {"cmd": "bash x", "comm": "bash", "first": 2.0, "cpu": 1.0},
               {"cmd": "bash y", "comm": "bash", "first": 9.0, "cpu": 7.0}]
    assert totals(records, until=6.0) == [("Prefect server", 14.0, 2), ("other: bash", 1.0, 1)]
    assert totals(records, since=3.0) == [("other: bash", 7.0, 1), ("Prefect server", 4.0, 1)]


def _catches_sigterm(pid: int) -> bool:
    """A SIGTERM before the recorder's handler is in place would kill it unwritten."""
    status = Path(f"/proc/{pid}/status").read_text()
    caught = next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(int(caught, 16) & 1 << (signal.SIGTERM - 1))


def _burner(seconds: float, tag: str) -> subprocess.Popen[str]:
    """A child that burns ``seconds`` of its own CPU (not of wall time: two cores shared with
    other lanes gave a 3 s busy loop 0.73 s), says so, and then stays alive, idle."""
    return subprocess.Popen([sys.executable, "-c", "import time\n"
                             f"while time.process_time() < {seconds}: pass\n"
                             f"print('burnt', flush=True)\ntime.sleep(120)\n# {tag}"],
                            stdout=subprocess.PIPE, text=True)


def test_a_recording_counts_only_the_cpu_spent_while_it_runs(tmp_path: Path) -> None:
    """A child that burnt 1.5 s before the recorder's first sample, idle since, counts about
    nothing (a machine's threads alive for hours had counted their whole lives); one that
    starts after that sample and burns 1.5 s counts it, read to its last tick by the
    recorder's last sample."""
    out = tmp_path / "cpu.json"
    before = _burner(1.5, "tpurl-cpu-before")
    during: subprocess.Popen[str] | None = None
    recorder: subprocess.Popen[bytes] | None = None
    try:
        assert before.stdout is not None and before.stdout.readline().strip() == "burnt"
        recorder = subprocess.Popen([sys.executable,
                                     str(REPO_ROOT / "scripts/cpu_by_process.py"),
                                     "record", str(out)])
        wait_until(lambda: out.exists(), 30, "the recorder's first sample")
        during = _burner(1.5, "tpurl-cpu-during")
        assert during.stdout is not None and during.stdout.readline().strip() == "burnt"
        wait_until(lambda: _catches_sigterm(recorder.pid), 30, "the recorder's SIGTERM handler")
        recorder.send_signal(signal.SIGTERM)
        assert recorder.wait(timeout=30) == 0
    finally:  # a recorder left running would sample /proc until the machine stops
        for child in (before, during, recorder):
            if child is not None and child.poll() is None:
                child.kill()
                child.wait(timeout=30)
    records = json.loads(out.read_text())
    (old,) = [r for r in records if "tpurl-cpu-before" in r["cmd"]]
    (new,) = [r for r in records if "tpurl-cpu-during" in r["cmd"]]
    assert old["cpu"] < 0.2, old
    assert new["cpu"] >= 1.4, new  # /proc counts whole ticks
