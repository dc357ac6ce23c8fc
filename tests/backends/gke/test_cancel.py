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

import time
from pathlib import Path

import pytest

from tests.fakes.gke_backend import (
    cancel_like_the_runner,
    child_is_running,
    flow_child,
    jobsets_created,
    no_jobsets_left,
)
from tests.fakes.kube_api import FakeApiServer, FakeKube
from tests.fakes.kube_api.nodepools import Autoscaler, TpuPool
from tests.fakes.kube_api.scenarios import admit, say, scenario, start
from tests.support.polling import until
from tests.support.profiles import fake_hf_token

pytestmark = [pytest.mark.services, pytest.mark.realtime]  # the flow child's own Prefect API


def test_prefect_cancellation_deletes_the_jobset(tmp_path: Path) -> None:
    with FakeApiServer(FakeKube()) as server:
        kube = scenario(server.kube, [(0.1, admit), (0.05, start), (0.05, say("step 1")),
                                      (900, say("never"))])
        with flow_child(server.url, tmp_path) as child:
            # the child starts Prefect's temporary API first: over a minute on a loaded
            # 2-core machine, so the wait is generous (a budget, not a timing assertion)
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline and not child_is_running(tmp_path, child):
                time.sleep(0.1)
            assert jobsets_created(kube) == 1 and kube.find("jobsets")
            cancel_like_the_runner(child)
        assert no_jobsets_left(kube, within_s=60)
        assert "deleting the JobSet" in (tmp_path / "child.log").read_text()


def test_a_cancelled_run_leaves_no_tpu_node_behind(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The same cancellation against a TPU pool that scales from zero
    (tests/fakes/kube_api/nodepools.py): the JobSet is deleted, its pods go and the
    autoscaler removes the slice."""
    monkeypatch.setenv("HF_TOKEN", fake_hf_token("NnFRIBXuDL"))
    with FakeApiServer(FakeKube()) as server:
        pool = TpuPool()
        scaler = Autoscaler(server.kube, pool)
        kube = scenario(server.kube, [(0.1, admit), (0.05, start), (0.05, say("step 1")),
                                      (60, say("never"))])
        try:
            with flow_child(server.url, tmp_path) as child:
                assert until(lambda: scaler.nodes and child_is_running(tmp_path, child),
                             within_s=600)
                cancel_like_the_runner(child)
            assert until(lambda: not kube.find("jobsets") and not scaler.nodes, within_s=60)
            assert [n for _, n in pool.history] == [0, 8, 0]
        finally:
            scaler.stop()
