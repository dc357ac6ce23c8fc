"""`tpurl teardown` asks before it destroys: real `tpurl` processes, a real pseudo-terminal
for the question. Nothing here reaches a cloud: every case stops before the flow, or the
flow stops at its first cloud call (no credentials on this machine)."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from flows.common.paths import REPO_ROOT
from tests.support.prefect_database import seed_home
from tests.support.profiles import TUTORIAL, TUTORIAL_REQUIRED

TPURL = str(Path(sys.executable).with_name("tpurl"))
SETS = [arg for k, v in TUTORIAL_REQUIRED.items() for arg in ("--set", f"{k}={v}")]

pytestmark = [pytest.mark.services, pytest.mark.realtime]  # `tpurl teardown` starts its own Prefect API


@pytest.fixture(autouse=True)
def _own_prefect_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each `tpurl` here gets a PREFECT_HOME of its test: its private API's database is never
    shared with another run on the machine (it starts migrated: tests/support/prefect_database.py)."""
    seed_home(tmp_path / "prefect-home")
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "prefect-home"))
    monkeypatch.setenv("TPURL_CACHE_DIR", str(tmp_path / "tpurl-cache"))


def _tpurl(*args: str, answer: str | None = None, timeout: float = 600
           ) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
    env = {k: v for k, v in env.items() if not k.startswith("GOOGLE_")}
    if answer is None:
        return subprocess.run([TPURL, "teardown", TUTORIAL, *SETS, *args], cwd=REPO_ROOT,
                              env=env, text=True, capture_output=True, stdin=subprocess.DEVNULL,
                              timeout=timeout, check=False)
    main, tty = pty.openpty()  # stdin is a terminal; the answer is typed into it
    try:
        os.write(main, (answer + "\n").encode())
        return subprocess.run([TPURL, "teardown", TUTORIAL, *SETS, *args], cwd=REPO_ROOT,
                              env=env, text=True, capture_output=True, stdin=tty,
                              timeout=timeout, check=False)
    finally:
        os.close(main)
        os.close(tty)


def test_delete_bucket_without_confirm_bucket_is_refused_first():
    done = _tpurl("--delete-bucket", "--yes")
    assert done.returncode == 2
    assert "--delete-bucket needs --confirm-bucket NAME" in done.stderr
    assert "will destroy" not in done.stdout  # refused before the preview, before anything
    mismatch = _tpurl("--delete-bucket", "--confirm-bucket", "other-bucket", "--yes")
    assert mismatch.returncode == 2 and "does not match gke.bucket" in mismatch.stderr


def test_no_terminal_and_no_yes_is_refused_after_the_preview():
    done = _tpurl()
    assert done.returncode == 2 and "pass --yes" in done.stderr
    assert "cluster tpurl-v6e" in done.stdout and "32 chips" in done.stdout
    assert "$86.40/h" in done.stdout  # 32 chips × the v6e list price 2.70 $/chip-hour, static
    assert "kept: bucket gs://my-tpurl-bucket" in done.stdout


@pytest.mark.parametrize("answer", ["", "yes", "tpurl-v6"])
def test_anything_but_the_cluster_name_cancels(answer: str, tmp_path: Path):
    done = _tpurl(answer=answer)
    assert done.returncode == 1 and "teardown cancelled; nothing was touched" in done.stderr
    # refused before any API server started (tpurl's own logs its output in the cache)
    assert not list((tmp_path / "tpurl-cache" / "logs").glob("api-server-*.log"))


def test_the_cluster_name_goes_ahead_on_the_private_api(tmp_path: Path):
    done = _tpurl("--delete-bucket", "--confirm-bucket", "my-tpurl-bucket",
                  answer="tpurl-v6e")
    out = done.stdout + done.stderr
    assert "cannot be undone" in done.stdout
    # tpurl's own server (flows/console/api_server.py), whose output goes to its log, not Prefect's
    # stock temporary server (which announces itself on the terminal)
    assert list((tmp_path / "tpurl-cache" / "logs").glob("api-server-*.log")), out
    assert "Starting temporary server" not in out
    assert done.returncode == 1 and "teardown failed: [user-error]" in done.stderr
    # diagnosed (no credentials here): said once, Prefect's traceback only in the log file
    assert "Traceback" not in out and out.count("no Google credentials") == 1
    assert "full log: " in done.stderr
