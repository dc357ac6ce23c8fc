"""The GKE backend against a scheduler that binds pods after the Job controller made them,
as kube-scheduler does (tests/fakes/kube_api/scheduler.py cites the binding).

Before, the fake created every pod already bound to its node (without the TPU-pool fake),
so the watch never read a Pending pod with no node and no PodScheduled condition: the
window a real cluster shows on every submission."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from flows.core.failures import StageFailed
from tests.fakes.gke_backend import BUDGETS, jobsets_created, run_stage
from tests.fakes.kube_api import FakeApiServer, FakeKube
from tests.fakes.kube_api.scenarios import admit, say, scenario, start, succeed
from tests.support.profiles import fake_hf_token


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeApiServer]:
    monkeypatch.setenv("HF_TOKEN", fake_hf_token("Hx3pLq9VnB"))
    with FakeApiServer(FakeKube()) as srv:
        yield srv


def test_pods_bound_after_the_schedule_budget_are_waited_for_not_called_unschedulable(
        server: FakeApiServer, tmp_path: Path) -> None:
    """Pods stay unbound (no node, no PodScheduled) for 1.5 s, past a 0.2 s schedule budget:
    not a scheduling failure (the scheduler has not tried yet); the slice is named only once
    every TPU pod is bound, with the nodes they are bound to."""
    server.kube.binding_delay_s = 1.5
    kube = scenario(server.kube, [(0.05, admit), (0.05, start), (0.05, say("step 1")),
                                  (0.1, succeed)])
    budgets = dataclasses.replace(BUDGETS, schedule_s=0.2)
    outcome, logger, _, backend = run_stage(server, "train", tmp_path, budgets)
    assert not isinstance(outcome, StageFailed), outcome
    assert jobsets_created(kube) == 1 and outcome.submissions == 1
    with kube.cond:
        created = [o for _, p, kind, o in kube.history if p == "pods" and kind == "ADDED"]
        bound = {o["spec"]["nodeName"] for _, p, _, o in kube.history
                 if p == "pods" and o["spec"].get("nodeName")}
    assert created and not any(o["spec"].get("nodeName") for o in created)  # made unbound
    tpu_nodes = {n for n in bound if not n.startswith("node-")}  # not the CPU pool's
    assert tpu_nodes
    served = [line for line in logger.lines if "the slice came up" in line]
    assert len(served) == 1 and f"{len(tpu_nodes)} node(s)" in served[0], logger.lines
    pool = next(iter(tpu_nodes)).split("-node-")[0]
    assert f"node pool {pool}," in served[0]
    monitor = backend.monitor
    assert monitor is not None and monitor.served_at is not None
    assert monitor.served_at >= kube.action_times["pods_bound"]  # named after the binding
