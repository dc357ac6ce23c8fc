"""Issue 32's proof against the fake regional cluster (tests/fakes/kube_api/node_groups.py):
one autoscaled TPU pool per (capacity mode, zone); a stockout in a zone backs its pool off
and the autoscaler brings the slice up in another zone; a stockout in every zone of a mode
makes the train stage fall back to the next mode of gke.capacity, resuming from the
checkpoint the first attempt wrote; a spot preemption in the fallback mode resumes again."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from flows.config.profile import Profile
from flows.core.failures import StageFailed
from tests.fakes.gke_backend import BUDGETS, jobsets_created, run_stage
from tests.fakes.kube_api import FakeApiServer, FakeKube
from tests.fakes.kube_api.node_groups import (
    ZONE_LABEL,
    ClusterAutoscaler,
    NodeGroup,
    regional_groups,
)
from tests.fakes.kube_api.scenarios import admit, say, scenario, start, succeed
from tests.support.polling import until
from tests.support.profiles import capacity_overrides, fake_hf_token, tutorial_profile

ZONES = ["us-east5-a", "us-east5-b", "us-east5-c"]
RUN = [(0.05, admit), (0.05, start), (0.05, say("step 1", "saved checkpoint 1")),
       (0.1, succeed)]


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeApiServer]:
    monkeypatch.setenv("HF_TOKEN", fake_hf_token("Qx7kP2mZ9v"))
    with FakeApiServer(FakeKube()) as running:
        yield running


def groups_for(profile: Profile, zones: list[str], modes: list[str],
               **settings: Any) -> list[NodeGroup]:
    gke = profile.gke
    assert gke is not None
    return regional_groups(zones, modes, hosts=gke.hosts_per_slice,
                           accelerator=gke.machine.accelerator_label, topology=gke.topology,
                           **settings)


def test_a_stockout_in_the_first_zone_trains_in_the_second(server, tmp_path: Path) -> None:
    profile = tutorial_profile(**capacity_overrides("on-demand"))
    groups = groups_for(profile, ZONES[:2], ["on-demand"], provision_s=0.2)
    groups[0].stockout = True  # hours long: it lasts the whole test
    scaler = ClusterAutoscaler(server.kube, groups)
    try:
        scenario(server.kube, RUN)
        budgets = dataclasses.replace(BUDGETS, schedule_s=30.0)
        outcome, logger, _log, backend = run_stage(
            server, "train", tmp_path, budgets, profile=profile)
        assert not isinstance(outcome, StageFailed), outcome
        assert jobsets_created(server.kube) == 1
        assert groups[0].failures >= 1  # it was tried, failed, and backed off
        assert [n for _, n in groups[0].history] == [0]  # no TPU node ever in zone a
        assert max(n for _, n in groups[1].history) == 8  # the whole slice in zone b
        assert backend.monitor is not None and backend.monitor.served is not None
        assert backend.monitor.served.zone == "us-east5-b"
        assert any("the slice came up in zone us-east5-b" in line for line in logger.lines)
        assert [a["zone"] for a in outcome.capacity] == ["us-east5-b"]
        assert until(lambda: not scaler.tpu_nodes())  # scaled back to zero
        assert not [n for n in scaler.tpu_nodes()
                    if n["metadata"]["labels"][ZONE_LABEL] == "us-east5-a"]
    finally:
        scaler.stop()
