"""The venvs' install lock (flows/backends/local/image.py) against real processes: a second
run waits for the holder and names it; a holder killed with SIGKILL frees it (the kernel
drops a dead process's flock); the image stage holds it from its done-check to its record."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from flows.backends.local.image import install_lock
from flows.common.paths import REPO_ROOT

HOLDER = """
import sys, time
from pathlib import Path
from flows.backends.local.image import install_lock
class Quiet:
    def info(self, *a): pass
with install_lock(Path(sys.argv[1]), Quiet()):
    Path(sys.argv[2]).write_text("held")
    while not Path(sys.argv[3]).exists():
        time.sleep(0.05)
"""


class Lines:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def info(self, msg: str, *args: object) -> None:
        self.lines.append(msg % args)


def _holder(tmp_path: Path) -> tuple[subprocess.Popen[bytes], Path]:
    held, release = tmp_path / "held", tmp_path / "release"
    child = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path / "venvs" / "rehearsal"),
                              str(held), str(release)], cwd=REPO_ROOT,
                             env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    deadline = time.monotonic() + 120
    while not held.exists():
        assert child.poll() is None and time.monotonic() < deadline, "the holder did not start"
        time.sleep(0.05)
    return child, release


def _acquire_in_thread(tmp_path: Path, log: Lines) -> tuple[threading.Thread, threading.Event]:
    got = threading.Event()

    def take() -> None:
        with install_lock(tmp_path / "venvs" / "rehearsal", log):
            got.set()

    thread = threading.Thread(target=take, daemon=True)
    thread.start()
    return thread, got


def test_a_second_run_waits_for_the_holder_and_names_it(tmp_path: Path) -> None:
    child, release = _holder(tmp_path)
    try:
        log = Lines()
        thread, got = _acquire_in_thread(tmp_path, log)
        assert not got.wait(1.0), "taken while another process held it"
        assert log.lines == [f"waiting for another run's install of the venvs (pid {child.pid}) "
                             "to finish"]
        release.write_text("go")
        assert got.wait(60), "not taken after the holder released it"
        thread.join(10)
    finally:
        child.kill()
        child.wait()


def test_a_holder_killed_mid_install_frees_the_lock(tmp_path: Path) -> None:
    child, _ = _holder(tmp_path)
    log = Lines()
    thread, got = _acquire_in_thread(tmp_path, log)
    assert not got.wait(1.0)
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    assert got.wait(30), "a dead holder's lock was not released"
    thread.join(10)


def test_the_image_stage_holds_it_from_done_check_to_record(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """ProvidedStage.execute wraps the whole stage (Stage.execute: done-check, run, verify,
    record) in the provider's exclusive section."""
    from flows.core import stage as stages
    from flows.core.stage import ProvidedStage

    order: list[str] = []

    class Provider:
        @contextmanager
        def exclusive(self, ctx: Any):
            order.append("locked")
            yield
            order.append("unlocked")

    class Stage(ProvidedStage):
        name = "image"
        title = "t"

        def key(self, profile: Any) -> str:
            return "k"

        def provider(self, backend: Any) -> Any:
            return Provider()

    def inner(self: Any, ctx: Any, upstream: Any) -> str:
        order.append("execute")
        return "out"

    monkeypatch.setattr(stages.Stage, "execute", inner)
    ctx = type("Ctx", (), {"backend": None})()
    assert Stage().execute(ctx, {}) == "out"  # type: ignore[arg-type]
    assert order == ["locked", "execute", "unlocked"]
