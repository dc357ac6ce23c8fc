"""A cluster deployed in one capacity mode, then the profile switched to another: the infra stage
must re-apply the blueprint so the TPU pool is the new mode's, never keep the old pool and
call it a match. What main did: any autoscaled pool (on-demand, spot, even flex-start, whose
nodes end after max_run_duration) passed for capacity reservation, so the deploy was skipped
and training ran on preemptible or short-lived nodes while the plan said "static pool on
reservation". The fake gcluster builds each pool as gcluster and gke-node-pool would
(tests/fakes/cloud/gcluster_expand.py); the GKE API fields read are container v1 NodePool's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from flows.backends.gke.infra import clients
from flows.backends.gke.infra.cluster import live_capacity, pool_mismatches, tpu_pools
from flows.backends.gke.infra.infra_stage import run_gke
from flows.backends.gke.infra.settings import settings_from_profile
from flows.config.capacity import CAPACITY_MODES
from tests.fakes.cloud import Cloud
from tests.support.logs import Log
from tests.support.profiles import capacity_profile

SWITCHES = [(a, b) for a in CAPACITY_MODES for b in CAPACITY_MODES if a != b]


@pytest.mark.parametrize(("first", "then"), SWITCHES, ids=[f"{a}-to-{b}" for a, b in SWITCHES])
def test_a_switch_of_capacity_redeploys_the_pool_of_the_new_mode(
        first: str, then: str, tmp_path: Path, cloud: Cloud, gcs: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(clients, "default_clients", lambda s: (cloud.apis, gcs))
    monkeypatch.setenv("TPURL_CACHE_DIR", str(tmp_path / "cache"))
    run_gke(capacity_profile(first), Log())
    profile = capacity_profile(then)
    s = settings_from_profile(profile)
    before = cloud.apis.get_cluster(s.gke.project, s.gke.region, s.gke.cluster)
    assert pool_mismatches(before, s), f"a {first} pool passed for capacity {then}"

    report = run_gke(profile, Log())

    assert report.deployed, report.deploy_skipped_reason
    after = cloud.apis.get_cluster(s.gke.project, s.gke.region, s.gke.cluster)
    assert pool_mismatches(after, s) == []
    assert [live_capacity(p) for p in tpu_pools(after, s)] == [then]


def test_a_reservation_profile_does_not_take_an_autoscaled_pool_for_its_static_one() -> None:
    """Pure: each way an autoscaled or spot pool differs from the reservation's is named."""
    s = settings_from_profile(capacity_profile("reservation"))
    spot = {"name": "p", "config": {"machineType": "ct6e-standard-4t", "spot": True,
                                    "reservationAffinity": {"consumeReservationType":
                                                            "NO_RESERVATION"}},
            "autoscaling": {"enabled": True, "maxNodeCount": 8},
            "placementPolicy": {"tpuTopology": "4x8"}}
    assert pool_mismatches({"status": "RUNNING", "nodePools": [spot]}, s) == [
        "pool p has label tpurl/capacity=None, profile's reservation pool wants reservation",
        "pool p autoscales, profile's capacity reservation wants a static pool of 8 nodes",
        "pool p consumes reservation none (NO_RESERVATION), profile wants my-v6e-res",
        "pool p has spot=True, profile's capacity is reservation"]
    assert live_capacity(spot) == "spot"


def test_a_flex_start_pool_of_another_lifetime_is_redeployed(
        tmp_path: Path, cloud: Cloud, gcs: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """gke.max_run_hours raised from 4 to 12 on a deployed flex-start cluster: the live pool's
    maxRunDuration (gke-node-pool main.tf writes max_run_duration as "<seconds>s") still ends
    the nodes after 4 h, so the pool is no match and the blueprint is applied again. What main
    did: flexStart matched, the deploy was skipped, and every 12 h attempt the plan allowed
    was cut at 4 h."""
    monkeypatch.setattr(clients, "default_clients", lambda s: (cloud.apis, gcs))
    monkeypatch.setenv("TPURL_CACHE_DIR", str(tmp_path / "cache"))
    run_gke(capacity_profile("flex-start", **{"gke.max_run_hours": "4"}), Log())
    profile = capacity_profile("flex-start")  # 12 h
    s = settings_from_profile(profile)
    before = cloud.apis.get_cluster(s.gke.project, s.gke.region, s.gke.cluster)
    assert pool_mismatches(before, s) == [
        "pool gke-tpu-v6e-pool lets its nodes live 4 h, profile's gke.max_run_hours is "
        "12 h (43200 s)"]

    report = run_gke(profile, Log())

    assert report.deployed, report.deploy_skipped_reason
    after = cloud.apis.get_cluster(s.gke.project, s.gke.region, s.gke.cluster)
    assert pool_mismatches(after, s) == []
    [pool] = tpu_pools(after, s)
    assert pool["config"]["maxRunDuration"] == "43200s"
