"""A Ctrl-C lands wherever the CLI's main thread happens to be. Delivered at every line the
local backend's run_command runs while it starts and watches a program (each of its own
lines, and each entry into the threading code it calls, such as the wait inside
Thread.start: a signal's handler runs where Python checks for one, on entering a
function), it must leave: no thread that would hold the interpreter's
exit (a `tpurl run` that never exits after Ctrl-C: the CLI interrupt test saw one in CI),
no process of the program's group, no pid tag.

The interrupt is raised by a trace function (sys.settrace), which Python turns into an
exception at that line of the traced frame, as a signal handler's would be."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
import uuid
from pathlib import Path

from flows.backends.local import backend as backend_module
from flows.backends.local.backend import LocalBackend
from flows.config import load_profile
from flows.core.storage import file_uri
from tests.support.interrupt_points import InterruptAt, caused_by_interrupt, marked

RUN_COMMAND = LocalBackend.run_command.__code__
WAIT_LINE = next(i for i, line in enumerate(Path(backend_module.__file__).read_text()
                                            .splitlines(), 1) if "returncode = proc.wait()" in line)


def test_an_interrupt_at_any_line_leaves_no_thread_process_or_tag(tmp_path: Path) -> None:
    profile = load_profile("rehearsal", {"local.root": str(tmp_path / "root"),
                                         "local.venv": sys.prefix}, environ={})
    made = LocalBackend(profile, stage="test", timeout_s=3600)
    log_uri = file_uri(tmp_path / "logs" / "probe.log")
    threads_before = set(threading.enumerate())
    points = []
    for target in range(1, 2000):
        marker = f"tpurl-probe-{uuid.uuid4().hex}"
        argv = ["/bin/sh", "-c", f"echo ready; sleep 30; : {marker}"]  # sh keeps the mark
        trace = InterruptAt(target, RUN_COMMAND)
        sys.settrace(trace)
        try:
            made.run_command("probe", argv, log_uri)
        except BaseException as exc:  # what the interrupt became
            # a Ctrl-C inside threading's own lock juggling can surface as its RuntimeError
            # (the interrupt as its context): still the interruption, handled as one
            assert caused_by_interrupt(exc), f"interrupted at {trace.where}: {exc!r}"
        finally:
            sys.settrace(None)
        assert trace.where != ("", 0), "ran to the end without the interrupt"
        points.append(trace.where)
        holding = [t for t in set(threading.enumerate()) - threads_before
                   if not t.daemon and (t.join(2.0) or t.is_alive())]
        assert not holding, f"interrupted at {trace.where}: {holding} would hold the exit"
        deadline = time.monotonic() + 15
        while (left := marked(marker)) and time.monotonic() < deadline:
            time.sleep(0.05)
        for pid in left:  # started but not stopped: kill it so the next case starts clean
            os.kill(pid, signal.SIGKILL)
        assert not left, f"interrupted at {trace.where}: the program was left running"
        assert not list((tmp_path / "logs").glob("*.pid")), f"tag left at {trace.where}"
        if trace.where == (backend_module.__file__, WAIT_LINE):
            break  # past this line the program's own exit is what ends run_command
    else:
        raise AssertionError("never reached the wait for the program")
    assert any(where[0].endswith("threading.py") for where in points)
    print(f"\n{len(points)} interrupt points, each left nothing behind")
