"""A Prefect cancellation of a flow run deletes the JobSet the run owns.

How Prefect delivers it (prefect 3.x): the runner's ProcessManager.kill
(prefect/runner/_process_manager.py) sends SIGTERM to the flow process after announcing the
intent on the control channel (prefect/runner/_control_channel.py); the flow engine's
capture_sigterm (prefect/utilities/engine/__init__.py) turns that SIGTERM into a
TerminationSignal (a BaseException) raised in the main thread, where the task runs
run_workload. So the test runs a real flow run in a child process, as the runner does, and
sends it the runner's SIGTERM once the JobSet exists.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from pathlib import Path

from tests.fakes.gke_backend import jobsets_created, no_jobsets_left, prefect_flow_child
from tests.fakes.kube_api import FakeApiServer, FakeKube
from tests.fakes.kube_api.scenarios import admit, say, scenario, start


def test_prefect_cancellation_deletes_the_jobset(tmp_path: Path) -> None:
    with FakeApiServer(FakeKube()) as server:
        kube = scenario(server.kube, [(0.1, admit), (0.05, start), (0.05, say("step 1")),
                                      (60, say("never"))])
        child = multiprocessing.get_context("spawn").Process(
            target=prefect_flow_child, args=(server.url, str(tmp_path)))
        child.start()
        try:
            deadline = time.monotonic() + 60
            log = tmp_path / "child.log"
            while time.monotonic() < deadline and not (
                    log.exists() and "is running" in log.read_text()):
                time.sleep(0.1)
            assert jobsets_created(kube) == 1 and kube.find("jobsets")
            assert child.pid is not None
            os.kill(child.pid, signal.SIGTERM)  # what the runner's kill() sends on cancel
            child.join(30)
        finally:
            if child.is_alive():
                child.kill()
        assert no_jobsets_left(kube, within_s=5)
        assert "deleting the JobSet" in (tmp_path / "child.log").read_text()
