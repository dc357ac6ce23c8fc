"""`tpurl status` (flows/operations/status.py) against the fake cloud after a real deploy through the infra
stage's code, and the fake Kubernetes API: what exists, what it costs per hour, read-only, and
exit 1 for a static TPU pool in a mode that scales from zero. Here (not in the CLI's status tests)
for the fake cloud's fixtures in this folder's conftest."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from flows.backends.gke.infra import clients
from flows.backends.gke.infra.infra_stage import planned_for
from flows.backends.gke.infra.provision import provision
from flows.backends.gke.infra.settings import settings_from_profile
from flows.backends.gke.watch import client as kube_client
from flows.cli import main
from flows.config import Profile
from flows.operations.status import human_bytes
from tests.fakes.cloud import Cloud
from tests.fakes.kube_api import FakeApiServer, FakeKube
from tests.support.cluster import cluster_at
from tests.support.logs import Log
from tests.support.profiles import (
    INFRA_OVERRIDES,
    SMOKE,
    SMOKE_REQUIRED,
    TUTORIAL,
    infra_profile,
    smoke_profile,
)

BUCKET = "my-status-bucket"


@pytest.fixture
def kube() -> Any:
    with FakeApiServer(FakeKube()) as server:
        yield server


def _deploy(profile: Profile, cloud: Cloud, gcs: Any, tmp: Path) -> None:
    provision(settings_from_profile(profile, cache_dir=tmp / "cache"), cloud.apis, gcs, Log(),
              planned=planned_for(profile))


def _nodes(kube: FakeKube, pool: str, count: int) -> None:
    # GKE labels every node with its pool (cloud.google.com/gke-nodepool), as the fake
    # autoscaler does (tests/fakes/kube_api/nodepools.py)
    for i in range(count):
        kube.create("nodes", "", {"metadata": {"name": f"{pool}-node-{i}", "labels": {
            "cloud.google.com/gke-nodepool": pool}}})


def _status(name: str, overrides: dict[str, str], cloud: Cloud, gcs: Any, server: FakeApiServer,
            monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(clients, "default_clients", lambda s: (cloud.apis, gcs))
    monkeypatch.setattr(kube_client, "connect", lambda profile: cluster_at(server.url))
    return main(["status", name, *[f"--set={k}={v}" for k, v in overrides.items()]])


def test_an_on_demand_run_in_flight_costs_its_nodes_now(
        cloud: Cloud, gcs: Any, kube: FakeApiServer, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    profile = smoke_profile(**{"gke.bucket": BUCKET})
    _deploy(profile, cloud, gcs, tmp_path)
    gcs.bucket(BUCKET).blob("qwen3-0.6b/x.bin").upload_from_string(b"\0" * 2048)
    _nodes(kube.kube, "gke-tpu-v6e-pool", 2)  # the slice is up: training holds it
    _nodes(kube.kube, "cpu-np", 1)
    kube.kube.create("jobsets", "default", {"metadata": {"name": "train-rl-abc", "labels": {
        "tpurl/stage": "train"}}, "spec": {"suspend": False}})
    kube.kube.create("jobsets", "default", {"metadata": {"name": "other-team"}, "spec": {}})
    before_cloud, before_requests = list(cloud.apis.calls), len(kube.kube.requests)
    capsys.readouterr()

    code = _status(SMOKE, {**SMOKE_REQUIRED, "gke.bucket": BUCKET}, cloud, gcs, kube,
                   monkeypatch)
    out = capsys.readouterr().out
    assert code == 0, out
    assert "TPU pool gke-tpu-v6e-pool: ct6e-standard-4t, autoscaled 0..2 nodes (on-demand), " \
           "2 node(s) now, $21.60/h" in out  # 2 hosts × 4 chips × $2.70
    assert "note:" not in out  # the pool is the profile's mode
    assert "CPU pools: 1 node(s) now" in out
    assert "JobSet train-rl-abc (train): running since" in out and "other-team" not in out
    blobs = list(gcs.list_blobs(BUCKET))  # ours, and the deployment's saved state
    size = human_bytes(sum(int(b.size) for b in blobs))
    assert f"bucket gs://{BUCKET}: {size} in {len(blobs)} object(s)" in out
    assert "TPU now: $21.60 per hour — you are paying for TPUs right now" in out
    # read-only: GETs on the Kubernetes API, one GET of the cluster, nothing run
    requests = kube.kube.requests[before_requests:]
    assert requests and {method for _, method, _ in requests} == {"GET"}
    assert cloud.apis.calls[len(before_cloud):] == ["get_cluster"]


def test_no_cluster_is_nothing_to_pay_for(cloud: Cloud, gcs: Any, kube: FakeApiServer,
                                          monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    code = _status(SMOKE, {**SMOKE_REQUIRED, "gke.bucket": BUCKET}, cloud, gcs, kube,
                   monkeypatch)
    out = capsys.readouterr().out
    assert code == 0
    assert "cluster tpurl-v6e (my-proj-123/us-east5): none" in out
    assert f"bucket gs://{BUCKET}: none" in out and "TPU now: $0.00 per hour" in out


@pytest.mark.parametrize("mode", ["on-demand", "reservation"])
def test_a_static_pool_in_a_mode_that_scales_from_zero_exits_non_zero(
        mode: str, cloud: Cloud, gcs: Any, kube: FakeApiServer, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The tutorial's static pool deployed, then the profile switched to on-demand (an old
    cluster kept by mistake): exit 1 with the fix. Under reservation the same pool is right."""
    _deploy(infra_profile(**{"gke.bucket": BUCKET}), cloud, gcs, tmp_path)
    _nodes(kube.kube, "gke-tpu-v6e-pool", 8)
    overrides = {"gke.project": "my-proj-123", "gke.region": "us-east5",
                 "gke.zone": "us-east5-b", "gke.cluster": "tpurl-v6e", "gke.bucket": BUCKET,
                 "gke.authorized_cidr": "203.0.113.0/24"}
    overrides.update({"gke.capacity": "on-demand"} if mode == "on-demand" else
                     {"gke.reservation": "my-v6e-res"})
    capsys.readouterr()
    code = _status(TUTORIAL, overrides, cloud, gcs, kube, monkeypatch)
    out = capsys.readouterr().out
    assert "static 8 nodes (reservation), 8 node(s) now, $86.40/h" in out  # the $86/h slice
    if mode == "on-demand":
        assert code == 1, out
        assert "PROBLEM: TPU pool gke-tpu-v6e-pool is static" in out
        assert "tpurl teardown qwen3-30b-a3b-v6e-32" in out
    else:
        assert code == 0 and "PROBLEM" not in out


def test_a_pool_left_by_another_mode_is_priced_at_its_own_mode(
        cloud: Cloud, gcs: Any, kube: FakeApiServer, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The reservation's static pool, then the profile switched to spot at $1.00/chip-h:
    the pool still bills 32 chips at the reservation's $2.70, $86.40/h, not the $32.00/h the
    spot price would make of it, and status says the next run replaces it."""
    from tests.support.profiles import capacity_overrides

    _deploy(infra_profile(**{"gke.bucket": BUCKET}), cloud, gcs, tmp_path)
    _nodes(kube.kube, "gke-tpu-v6e-pool", 8)
    overrides = {**INFRA_OVERRIDES, "gke.bucket": BUCKET,
                 **capacity_overrides("spot")}
    capsys.readouterr()
    code = _status(TUTORIAL, overrides, cloud, gcs, kube, monkeypatch)
    out = capsys.readouterr().out
    assert code == 1, out
    assert "static 8 nodes (reservation), 8 node(s) now, $86.40/h" in out, out
    assert "TPU now: $86.40 per hour" in out
    assert ("note: TPU pool gke-tpu-v6e-pool is reservation, the profile's gke.capacity is "
            "spot: the next `tpurl run qwen3-30b-a3b-v6e-32` re-applies the blueprint") in out


def test_after_teardown_the_reservation_still_bills_and_status_says_so(
        cloud: Cloud, gcs: Any, kube: FakeApiServer, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Deployed on the reservation (its 8 hosts in use: the pool's, priced with the pool),
    then torn down: the cluster is gone, and the reservation's 8 unused hosts still bill
    $86.40/h. Status said 'TPU now: $0.00 per hour'."""
    from flows.backends.gke.infra.destroy import teardown

    profile = infra_profile(**{"gke.bucket": BUCKET})
    _deploy(profile, cloud, gcs, tmp_path)
    _nodes(kube.kube, "gke-tpu-v6e-pool", 8)
    overrides = {**INFRA_OVERRIDES, "gke.bucket": BUCKET}
    capsys.readouterr()
    _status(TUTORIAL, overrides, cloud, gcs, kube, monkeypatch)
    out = capsys.readouterr().out
    assert "reservation my-v6e-res (us-east5-b): 8 host(s), 8 in use; the unused bill too " \
           "while it exists: $0.00/h" in out
    assert "TPU now: $86.40 per hour" in out  # the pool's nodes, not counted twice

    teardown(settings_from_profile(profile, cache_dir=tmp_path / "cache"), cloud.apis, gcs,
             Log())
    capsys.readouterr()
    _status(TUTORIAL, overrides, cloud, gcs, kube, monkeypatch)
    out = capsys.readouterr().out
    assert "cluster tpurl-v6e (my-proj-123/us-east5): none" in out
    assert "8 host(s), 0 in use; the unused bill too while it exists: $86.40/h" in out
    assert "TPU now: $86.40 per hour — you are paying for TPUs right now" in out


IDLE_RATE = {"reservation": "$86.40", "on-demand": "$0.00", "spot": "$0.00",
             "flex-start": "$0.00"}


@pytest.mark.parametrize("mode", sorted(IDLE_RATE))
def test_status_and_the_teardown_preview_agree_on_a_pool_whose_nodes_have_not_registered(
        mode: str, cloud: Cloud, gcs: Any, kube: FakeApiServer, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Just deployed, no Kubernetes node listed yet. GKE keeps a static pool at its count and
    its VMs bill from creation, registered or not: status said "static 8 nodes
    (reservation), 0 node(s) now, $0.00/h" and "TPU now: $0.00" while the teardown preview
    of the same pool said $86.40/h. A pool that scales from zero bills nothing idle."""
    from tests.support.profiles import capacity_overrides, capacity_profile

    _deploy(capacity_profile(mode, **{"gke.bucket": BUCKET}), cloud, gcs, tmp_path)
    overrides = {**INFRA_OVERRIDES, "gke.bucket": BUCKET, **capacity_overrides(mode)}
    capsys.readouterr()
    code = _status(TUTORIAL, overrides, cloud, gcs, kube, monkeypatch)
    teardown_code = main(["teardown", *[f"--set={k}={v}" for k, v in overrides.items()],
                          TUTORIAL])
    out = capsys.readouterr().out
    assert code == 0 and teardown_code == 2, out  # the preview stops: no terminal, no --yes
    rate = IDLE_RATE[mode]
    assert f"0 node(s) now, {rate}/h" in out and f"TPU now: {rate} per hour" in out, out
    [preview] = [x for x in out.splitlines() if x.startswith("  TPU pool ") and "costs" in x]
    assert f"costs {rate}/h" in preview, preview
