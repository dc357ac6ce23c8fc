"""The watch of a training JobSet on two slices (gke.num_slices: 2): the Pathways worker
replicated job has one Job per slice, each on its own node pool (tests/fakes/kube_api/
placement.py, after jobset's exclusive placement), and the JobSet is resumed only once every
slice runs (startupPolicy InOrder; tests/fakes/kube_api/slices.py). The other watch tests
run one slice, and profiles may ask for more."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from flows.core.failures import StageFailed
from flows.core.layout import Layout
from flows.core.programs import train_workload
from flows.core.storage import file_uri
from tests.fakes.gke_backend import BUDGETS, ListLogger, jobsets_created, make_backend
from tests.fakes.kube_api import FakeApiServer
from tests.fakes.kube_api.scenarios import Action, admit, say, scenario, succeed
from tests.fakes.kube_api.slices import preempt_slice, start_slice
from tests.fakes.kube_api.store import FakeKube
from tests.support.profiles import fake_hf_token, tutorial_profile

SLICES = 2


@pytest.fixture(autouse=True)
def _token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", fake_hf_token("multislice"))


def _train(server: FakeApiServer, tmp_path: Path, logger: ListLogger, budgets=BUDGETS):
    profile = tutorial_profile(**{"gke.num_slices": str(SLICES)})
    backend = make_backend(server.url, "train", tmp_path, logger, budgets, profile)
    workload = train_workload(backend.profile, Layout(backend.profile), backend.runtime)
    try:
        return backend.run_workload(workload, file_uri(tmp_path / "train.log"))
    except StageFailed as exc:
        return exc


def _workers_by_pool(kube: FakeKube) -> dict[str, set[str]]:
    """worker Job → the node pools its pods' nodes belong to."""
    pools = {n["metadata"]["name"]: (n["metadata"].get("labels") or {}).get(
        "cloud.google.com/gke-nodepool") for n in kube.find("nodes", "")}
    out: dict[str, set[str]] = {}
    for pod in kube.find("pods"):
        labels = pod["metadata"]["labels"]
        if labels["jobset.sigs.k8s.io/replicatedjob-name"] == "worker":
            out.setdefault(labels["jobset.sigs.k8s.io/job-index"], set()).add(
                pools.get(pod["spec"]["nodeName"]) or "?")
    return out


def test_the_watch_says_running_only_once_every_slice_runs(server: FakeApiServer,
                                                          tmp_path: Path) -> None:
    logger, seen = ListLogger(), {}

    def second_slice(kube: FakeKube, name: str) -> None:
        seen["pools"] = _workers_by_pool(kube)
        seen["lines"] = list(logger.lines)  # what the watch said with one slice up
        start_slice(1)(kube, name)

    script: list[tuple[float, Action]] = [
        # one slice up for 2 s: the watch says so on a tick in it, however loaded the machine
        (0.05, admit), (0.05, start_slice(0)), (2.0, second_slice),
        (0.3, say("step 1", "saved checkpoint 1")), (0.1, succeed)]
    scenario(server.kube, script)
    outcome = _train(server, tmp_path, logger)
    assert not isinstance(outcome, StageFailed), outcome
    # 2 worker Jobs of 8 pods, each Job on its own pool (the blueprint's pool per slice)
    assert seen["pools"] == {"0": {"tpu-slice-0"}, "1": {"tpu-slice-1"}}
    assert len([p for p in server.kube.find("pods") if p["metadata"]["labels"][
        "jobset.sigs.k8s.io/replicatedjob-name"] == "worker"]) == SLICES * 8
    before = seen["lines"]
    assert any(" is starting: " in line for line in before), before
    assert not any(line.endswith(" is running") for line in before), before
    assert any(line.endswith(" is running") for line in logger.lines), logger.lines


def test_one_slice_preempted_is_a_disruption_of_that_slice(server: FakeApiServer,
                                                          tmp_path: Path) -> None:
    """Slice 1's VMs are reclaimed while slice 0's pods keep running: the verdict is
    preempted, naming a pod of slice 1 on its own pool's node (not the program's error, not
    infrastructure); with no resubmission left the stage ends on the submission budget."""
    up: list[tuple[float, Action]] = [(0.05, admit), (0.05, start_slice(0)),
                                      (0.05, start_slice(1)),
                                      (0.1, say("step 1", "saved checkpoint 1"))]
    scenario(server.kube, [*up, (0.3, preempt_slice(1))])
    logger = ListLogger()
    outcome = _train(server, tmp_path, logger, dataclasses.replace(BUDGETS, preemptions=0))
    assert isinstance(outcome, StageFailed), outcome
    assert outcome.diagnosis.code == "gke/submission-budget", outcome.diagnosis
    [verdict] = [line for line in logger.lines if " was disrupted (" in line]
    assert "-worker-1-" in verdict and "(node tpu-slice-1-node-" in verdict, verdict
    assert "TerminationByKubelet: Pod was terminated in response to imminent node shutdown." \
        in verdict
    slice0 = [p for p in server.kube.find("pods")
              if p["metadata"]["labels"].get("jobset.sigs.k8s.io/replicatedjob-name") == "worker"
              and p["metadata"]["labels"]["jobset.sigs.k8s.io/job-index"] == "0"]
    assert slice0 and not any(c["type"] == "DisruptionTarget" for p in slice0
                   for c in p["status"].get("conditions") or []), slice0


def test_one_slice_preempted_is_resubmitted_and_resumes(server: FakeApiServer,
                                                       tmp_path: Path) -> None:
    up: list[tuple[float, Action]] = [(0.05, admit), (0.05, start_slice(0)),
                                      (0.05, start_slice(1))]
    scenario(server.kube, [*up, (0.1, say("step 1", "saved checkpoint 1")),
                           (0.3, preempt_slice(0))],
             [*up, (0.1, say("restored checkpoint 1")), (0.1, succeed)])
    logger = ListLogger()
    outcome = _train(server, tmp_path, logger)
    assert not isinstance(outcome, StageFailed), outcome
    assert outcome.submissions == 2 and outcome.preemptions == 1
    assert jobsets_created(server.kube) == 2
    assert any("preempted: resubmitting" in line for line in logger.lines), logger.lines
