"""A TPU pool created before the ``tpurl/capacity`` label: re-applying the blueprint cannot
add the label (Cluster Toolkit's gke-node-pool ignores node label changes, main.tf
``lifecycle { ignore_changes = [node_config[0].labels, ...] }``; the fake gcluster keeps a
kept pool's labels the same way, tests/fakes/cloud/gcluster_expand.py kept_labels), so the
infra stage says so before deploying, with the command that adds it in place."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest

from flows.backends.gke.infra import clients
from flows.backends.gke.infra.cluster import pool_mismatches, unlabelled_pools
from flows.backends.gke.infra.infra_stage import run_gke
from flows.backends.gke.infra.settings import settings_from_profile
from flows.core.failures import FailureCategory, StageFailed
from tests.fakes.cloud import Cloud
from tests.fakes.cloud import fakecloud_state as fc
from tests.fakes.cloud.gcluster_expand import kept_labels
from tests.support.logs import Log
from tests.support.profiles import capacity_profile


def _strip_label(cluster: str) -> None:
    """The pool as a deploy before the label made it: its node config without it."""
    state = fc.load()
    for pool in state["clusters"][cluster]["nodePools"]:
        (pool.get("config") or {}).get("labels", {}).pop("tpurl/capacity", None)
    fc.save(state)


def test_a_pool_without_the_label_is_refused_with_the_command_that_adds_it(
        tmp_path: Path, cloud: Cloud, gcs: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(clients, "default_clients", lambda s: (cloud.apis, gcs))
    monkeypatch.setenv("TPURL_CACHE_DIR", str(tmp_path / "cache"))
    profile = capacity_profile("spot")
    s = settings_from_profile(profile)
    run_gke(profile, Log())
    _strip_label(s.gke.cluster)
    deploys = len(cloud.calls("gcluster"))

    with pytest.raises(StageFailed) as failed:
        run_gke(profile, Log())

    diagnosis = failed.value.diagnosis
    assert diagnosis.category is FailureCategory.USER_ERROR
    assert "pool gke-tpu-v6e-pool (spot in us-east5-b) has tpurl/capacity=None, not spot: " \
           "re-applying the blueprint would not change it" in diagnosis.detail
    command = diagnosis.fix.split("in place (the pool and its nodes stay): ", 1)[1]
    command = command.removesuffix("; then rerun")
    assert command == (f"gcloud container node-pools update gke-tpu-v6e-pool "
                       f"--cluster={s.gke.cluster} --location=us-east5 --project=my-proj-123 "
                       "--node-labels=tpurl/capacity=spot")
    assert len(cloud.calls("gcluster")) == deploys  # no deploy

    subprocess.run(shlex.split(command), check=True)  # the fake gcloud, as GKE does it
    live = cloud.apis.get_cluster(s.gke.project, s.gke.region, s.gke.cluster)
    assert unlabelled_pools(live, s) == [] and pool_mismatches(live, s) == []
    assert not run_gke(profile, Log()).deployed


def test_a_pool_of_another_mode_is_replaced_and_so_relabelled(
        tmp_path: Path, cloud: Cloud, gcs: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """An unlabelled on-demand pool under a spot profile is no label problem: spot is a
    ForceNew field, the re-apply replaces the pool and the new one has the label."""
    monkeypatch.setattr(clients, "default_clients", lambda s: (cloud.apis, gcs))
    monkeypatch.setenv("TPURL_CACHE_DIR", str(tmp_path / "cache"))
    run_gke(capacity_profile("on-demand"), Log())
    profile = capacity_profile("spot")
    s = settings_from_profile(profile)
    _strip_label(s.gke.cluster)
    live = cloud.apis.get_cluster(s.gke.project, s.gke.region, s.gke.cluster)
    assert unlabelled_pools(live, s) == []
    assert run_gke(profile, Log()).deployed
    after = cloud.apis.get_cluster(s.gke.project, s.gke.region, s.gke.cluster)
    assert pool_mismatches(after, s) == []


def test_the_fake_toolkit_keeps_a_kept_pools_labels() -> None:
    old = {"name": "p", "config": {"machineType": "ct6e-standard-4t", "spot": True,
                                   "labels": {"team": "a"}}, "placementPolicy": {}}
    same = {"name": "p", "config": {"machineType": "ct6e-standard-4t", "spot": True,
                                    "labels": {"tpurl/capacity": "spot"}}, "placementPolicy": {}}
    assert kept_labels(old, same)["config"]["labels"] == {"team": "a"}
    replaced = {**same, "config": {**same["config"], "spot": False}}
    assert kept_labels(old, replaced)["config"]["labels"] == {"tpurl/capacity": "spot"}
