"""The Prefect API server kept between `tpurl` commands when the user asks for one
(flows/console/kept_api.py; TPURL_KEEP_API_S set here): reused, never two, stopped when idle
but never while in use, replaced when stale, shown and stopped by `tpurl api-server`. Real
servers and real command processes (tests/support/kept_probe.py enters `private_api()` as
`tpurl run` does). Who may use it: tests/test_api_access.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from flows.common.paths import REPO_ROOT
from flows.console.kept_api import KeptApiError, StateDir, idle_for, keep_seconds, running
from flows.core.processes import ProcessTag
from tests.support.polling import until
from tests.support.prefect_database import seed_home

pytestmark = [pytest.mark.services, pytest.mark.realtime]

STARTED = "tpurl: started a Prefect API server at"
KEEP = "TPURL_KEEP_API_S"
TPURL = str(Path(sys.executable).with_name("tpurl"))


def _env(tmp_path: Path, keep_s: float, **extra: str) -> dict[str, str]:
    seed_home(tmp_path / "prefect-home")  # migrated: tests/support/prefect_database.py
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env.update(TPURL_KEEP_API_S=str(keep_s), TPURL_CACHE_DIR=str(tmp_path / "cache"),
               PREFECT_HOME=str(tmp_path / "prefect-home"), PYTHONPATH=str(REPO_ROOT), **extra)
    return env


def _probe(env: dict[str, str], hold_s: float | str = 0.0) -> subprocess.Popen[str]:
    """A command using its API server ``hold_s`` seconds (``"stdin"``: until the test writes
    a line to it, for a hold that must outlast what the test does meanwhile)."""
    return subprocess.Popen([sys.executable, "-m", "tests.support.kept_probe", str(hold_s)],
                            cwd=REPO_ROOT, env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(probe: subprocess.Popen[str]) -> tuple[str, str]:
    out, err = probe.communicate("done\n", timeout=900)  # a line releases a "stdin" hold
    assert probe.returncode == 0, err
    return out.strip(), err


def _state(env: dict[str, str]) -> StateDir:
    return StateDir.for_database(env, Path(env["TPURL_CACHE_DIR"]))


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=3) as answer:
            return answer.status == 200
    except OSError:
        return False


def _stop(env: dict[str, str]) -> None:
    subprocess.run([TPURL, "api-server", "stop"], env=env, capture_output=True, timeout=120)


def test_the_next_command_reuses_it_and_the_cli_shows_and_stops_it(tmp_path: Path) -> None:
    env = _env(tmp_path, keep_s=600)
    try:
        first_url, first_err = _finish(_probe(env))
        assert STARTED in first_err and "tpurl api-server stop" in first_err
        keeper = _state(env).read()
        assert keeper is not None and running(keeper.keeper) and _answers(first_url)
        began = time.monotonic()
        second_url, second_err = _finish(_probe(env))
        reuse_s = time.monotonic() - began
        assert second_url == first_url and STARTED not in second_err
        assert _state(env).read() == keeper  # the same keeper, nothing started
        status = subprocess.run([TPURL, "api-server", "status"], env=env, capture_output=True,
                                text=True, timeout=120)
        assert first_url in status.stdout and "stops after 600 s idle" in status.stdout
        stopped = subprocess.run([TPURL, "api-server", "stop"], env=env, capture_output=True,
                                 text=True, timeout=120)
        assert f"stopped the kept Prefect API server at {first_url}" in stopped.stdout
        assert not running(keeper.keeper) and not _answers(first_url)
        assert _state(env).read() is None
        again = subprocess.run([TPURL, "api-server", "status"], env=env, capture_output=True,
                               text=True, timeout=120)
        assert "no kept Prefect API server is running" in again.stdout
        print(f"reused in {reuse_s:.1f} s (a process start, imports, one health check)")
    finally:
        _stop(env)


def test_in_use_it_stays_however_long_and_idle_it_stops(tmp_path: Path) -> None:
    env = _env(tmp_path, keep_s=2)
    try:
        holder = _probe(env, hold_s=12)  # six idle periods, asking the server all along
        assert until(lambda: _state(env).read() is not None, 600)
        # read while the holder still uses it: 2 s after the holder is done the keeper may
        # already have stopped and removed it (a loaded CI run saw the state gone)
        state = _state(env).read()
        assert state is not None and holder.poll() is None
        url, _ = _finish(holder)  # the probe asserted every answer while it held the server
        assert until(lambda: not running(state.keeper), 60), "the idle keeper did not stop"
        assert not _answers(url) and _state(env).read() is None
    finally:
        _stop(env)


def test_commands_at_once_share_one_server(tmp_path: Path) -> None:
    env = _env(tmp_path, keep_s=600)
    try:
        probes = [_probe(env) for _ in range(3)]
        results = [_finish(probe) for probe in probes]
        assert len({url for url, _ in results}) == 1
        assert sum(STARTED in err for _, err in results) == 1
    finally:
        _stop(env)


def test_a_stale_server_is_replaced_but_never_under_a_running_command(tmp_path: Path) -> None:
    env = _env(tmp_path, keep_s=600)
    folder = _state(env)
    try:
        # a state whose keeper is gone (a crash, a reboot): a new one is started
        folder.root.mkdir(parents=True)
        gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                              capture_output=True, text=True, check=True)
        dead = ProcessTag(pid=int(gone.stdout), ticks=1, host=os.uname().nodename,
                          started_at=0.0, what="tpurl kept API keeper")
        (folder.root / "state.json").write_text(json.dumps(
            {"keeper": dead.__dict__, "port": 1, "key": "old", "keep_s": 600,
             "auth_string": "old"}))
        url, err = _finish(_probe(env))
        assert STARTED in err and _answers(url)
        first = folder.read()
        assert first is not None and first.keeper.pid != dead.pid
        # other Prefect settings, while another command uses it: that command keeps it, this
        # one gets a server of its own
        holder = _probe(env, hold_s="stdin")  # held until the other command has finished
        if not until(lambda: len(folder.users()) == 1, 300):
            holder.kill()  # what it said is the only account of why it never used the server
            _, said = holder.communicate(timeout=30)
            pytest.fail(f"the holding command never used the kept server (exit "
                        f"{holder.returncode}); its stderr: {said[-3000:]}")
        other = _env(tmp_path, keep_s=600, PREFECT_LOGGING_LEVEL="WARNING")
        own_url, own_err = _finish(_probe(other))
        assert "this command starts a Prefect API server of its own" in own_err
        assert own_url != url and running(first.keeper) and folder.read() == first
        _finish(holder)
        # the same, once nobody uses it: replaced
        new_url, new_err = _finish(_probe(other))
        assert STARTED in new_err and not running(first.keeper)
        replaced = folder.read()
        assert replaced is not None and replaced.keeper.pid != first.keeper.pid
        assert _answers(new_url)
    finally:
        _stop(env)


def test_a_bad_keep_time_names_the_variable_and_the_fix() -> None:
    assert keep_seconds({}) == 0 and keep_seconds({"TPURL_KEEP_API_S": " 0 "}) == 0
    assert keep_seconds({}, default=900) == 900 and keep_seconds({KEEP: "60"}) == 60
    for bad in ("15m", "-1"):
        with pytest.raises(KeptApiError, match=r"TPURL_KEEP_API_S.*fix"):
            keep_seconds({"TPURL_KEEP_API_S": bad})


def test_idle_time_counts_from_the_last_use_and_not_while_in_use() -> None:
    assert idle_for(now=100, last_used=90, started=50, users=0) == 10
    assert idle_for(now=100, last_used=0, started=70, users=0) == 30
    assert idle_for(now=100, last_used=10, started=0, users=1) == 0
