"""The smoke run's start-up against its spend cap, on the fake cluster with a clock the test
moves: the Pathways head pulls its image for 20 minutes on the CPU pool, then (JobSet InOrder:
the workers exist only once the head runs) the TPU pool scales up from zero in 10 minutes,
training runs, the CPU pool scales up for the export, and the autoscaler removes the nodes
10 minutes after that (unneeded, and the delay after the cluster's last scale-up). GCP bills
the TPU VMs from their creation, a boot before their nodes register, to their deletion; the
meter must charge that (the VMs' creation read through instances.get, the nodes' ends through
the node watch), not the head's wait."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import pytest

from flows.backends.gke.watch.spend import SpendMeter, meter_for
from flows.config.spend import SCALE_DOWN_DELAY_AFTER_ADD_S, SCALE_DOWN_UNNEEDED_S
from flows.core.failures import StageFailed
from flows.core.layout import Layout
from flows.core.programs import train_workload
from flows.core.storage import file_uri
from tests.fakes.cloud.instances import FakeInstances
from tests.fakes.gke_backend import ListLogger, make_backend
from tests.fakes.kube_api import FakeApiServer, FakeKube
from tests.fakes.kube_api.nodepools import Autoscaler, TpuPool
from tests.fakes.kube_api.scenarios import NS, admit, start, succeed
from tests.support.fake_clock import Clock
from tests.support.polling import until
from tests.support.profiles import fake_hf_token, smoke_profile

STEP_S = 30.0  # the fake clock moves this much per watch tick
BOOT_S = 90.0  # a TPU VM's boot before its node registers (tests/fakes/cloud/instances.py)


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("HF_TOKEN", fake_hf_token("QedUStPKR0"))
    with FakeApiServer(FakeKube()) as running:
        yield running


def _advance(clock: Clock, meter: SpendMeter, seconds: float, watching: bool = True) -> None:
    """Move the clock one tick at a time; each tick, the autoscaler and (while the stage is
    watched) the monitor see the new time before the next."""
    end = clock.now + seconds
    while clock.now < end:
        clock.now = min(clock.now + STEP_S, end)
        time.sleep(0.12)  # two of the autoscaler's ticks
        if watching:
            assert until(lambda: meter.charged_at == clock.now, 10.0), "the watch stopped"


def _pods(kube: FakeKube, name: str, replicated_job: str) -> list[dict]:
    with kube.cond:
        return [p for p in kube.find("pods", NS, f"jobset.sigs.k8s.io/jobset-name={name}")
                if p["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"] ==
                replicated_job]


def test_a_slow_pull_and_scale_up_cost_nothing_and_the_meter_matches_the_nodes(
        server: FakeApiServer, tmp_path: Path) -> None:
    profile = smoke_profile()
    gke, timeline = profile.gke, profile.gke.train_timeline  # type: ignore[union-attr]
    assert gke is not None and timeline is not None and gke.max_usd_per_run is not None
    clock = Clock()
    began = float(int(time.time()))  # the wall-clock time the test's clock starts at

    def wall() -> float:
        return began + clock.now
    # GKE's nodes name their VMs, each created BOOT_S before its node registered
    pool = TpuPool(hosts=gke.hosts_per_slice, topology=gke.topology, provision_s=600.0,
                   unneeded_s=SCALE_DOWN_UNNEEDED_S, gce_project=gke.project)
    scaler = Autoscaler(server.kube, pool, clock=clock,
                        delay_after_add_s=SCALE_DOWN_DELAY_AFTER_ADD_S, wall=wall)
    logger = ListLogger()
    instances = FakeInstances(server.kube, boot_s=BOOT_S)
    backend = make_backend(server.url, "train", tmp_path, logger, profile=profile,
                           instances=instances)
    meter = backend.spend = meter_for(profile, "train", clock=clock, key=uuid.uuid4().hex)
    assert meter is not None
    meter.wall = wall
    workload = train_workload(profile, Layout(profile), backend.runtime)
    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(backend.run_workload(workload, file_uri(tmp_path / "train.log")))
        except StageFailed as exc:
            outcome.append(exc)
    runner = threading.Thread(target=run, daemon=True)
    try:
        runner.start()
        assert until(lambda: bool(server.kube.find("jobsets", NS)), 10.0)
        name = server.kube.find("jobsets", NS)[0]["metadata"]["name"]
        with server.kube.cond:
            admit(server.kube, name)  # InOrder: the head's pod only, bound to cpu-np
        assert _pods(server.kube, name, "pathways-head") and \
            not _pods(server.kube, name, "worker")
        _advance(clock, meter, 20 * 60)  # the head pulls the post-training image
        assert meter.spent_usd == 0.0 and not scaler.nodes
        with server.kube.cond:
            start(server.kube, name)  # the head runs: the workers' Jobs are resumed
        assert until(lambda: len(_pods(server.kube, name, "worker")) == gke.hosts_per_slice), (
            logger.lines, server.kube.find("jobsets", NS), _pods(server.kube, name, "worker"))
        assert until(lambda: scaler.provisioning_until is not None)  # TriggeredScaleUp
        _advance(clock, meter, 600)  # the slice comes up from zero
        assert until(lambda: len(scaler.nodes) == gke.hosts_per_slice)
        # the Job controller creates a worker unbound; it names a node only once the
        # autoscaler made it (a pod named a node that never existed: a lagging watch showed
        # the meter a slice that was not there, and it charged a tick too many)
        with server.kube.cond:
            named = {o["spec"].get("nodeName") for _, plural, _, o in server.kube.history
                     if plural == "pods" and o["metadata"]["labels"].get(
                         "jobset.sigs.k8s.io/replicatedjob-name") == "worker"}
        assert named - {None, ""} == set(scaler.nodes), named
        boot = gke.total_chips * BOOT_S / 3600 * gke.usd_per_chip_hour  # billed, unregistered
        assert meter.spent_usd <= gke.total_chips * STEP_S / 3600 * gke.usd_per_chip_hour + boot
        assert len(instances.calls) == gke.hosts_per_slice  # each VM read once
        _advance(clock, meter, timeline.minutes(billed=True) * 60)  # registration → last save
        with server.kube.cond:
            succeed(server.kube, name)
        runner.join(30.0)
        assert not runner.is_alive()
        assert not isinstance(outcome[0], StageFailed), outcome[0]  # no budget failure
        scaler.scaled_up_elsewhere()  # cpu-np, for the export
        _advance(clock, meter, SCALE_DOWN_DELAY_AFTER_ADD_S + STEP_S, watching=False)
        assert until(lambda: not scaler.nodes)  # the autoscaler removed the unneeded slice
        assert backend.node_tail is not None
        backend.node_tail.join(10.0)  # the node watch has seen them go
        billed = (scaler.node_seconds() * gke.chips_per_host / 3600 * gke.usd_per_chip_hour
                  + boot)  # the nodes' lives and their VMs' boots before them
        tick = gke.total_chips * STEP_S / 3600 * gke.usd_per_chip_hour
        assert billed == pytest.approx(meter.spent_usd, abs=tick), (billed, meter.spent_usd)
        assert meter.spent_usd < gke.max_usd_per_run
        # the nodes lived from the scale-up's end to 10 min after the pods (and cpu-np's
        # scale-up): the head's 20 min and the scale-up's 10 min were never billed
        assert [n for _, n in pool.history] == [0, gke.hosts_per_slice, 0]
        (_, _), (up, _), (down, _) = pool.history
        assert up == pytest.approx((20 + 10) * 60, abs=STEP_S)
        assert down - up == pytest.approx(
            timeline.minutes(billed=True) * 60 + SCALE_DOWN_UNNEEDED_S, abs=2 * STEP_S)
    finally:
        scaler.stop()
