"""A slice bound, run and deleted between two looks of the monitor (the JobSet controller
deletes a finished JobSet's active Jobs, their kubelets the pods, within a second): the
meter charges it from the last version the pod watch delivered of each worker
(flows/backends/gke/watch/spend.py ``BoundPods``), as pure calls with a clock the test
moves. The monitor's part (waiting for a lagging pod watch before the last charge) is
tests/backends/gke/watch/test_lagging_watch.py, against the fake cluster."""

from __future__ import annotations

import uuid
from datetime import datetime

import pytest

from flows.backends.gke.watch.spend import BoundPods, SpendMeter
from tests.support.fake_clock import Clock

TPU = [{"name": "pathways-worker", "resources": {"limits": {"google.com/tpu": "4"}}}]
HEAD = {"metadata": {"uid": "head"}, "spec": {"nodeName": "cpu-np-node-0", "containers": [
    {"name": "pathways-rm", "resources": {"requests": {"cpu": "8"}}}]},
    "status": {"phase": "Succeeded"}}
UNBOUND = {"metadata": {"uid": "w0"}, "spec": {"nodeName": "", "containers": TPU},
           "status": {"phase": "Pending"}}
BOUND_AT = "2026-12-04T10:00:00Z"


def _unix(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def _worker(*, finished_at: str | None = None, deleting_at: str | None = None,
            phase: str = "Failed", uid: str = "w0") -> dict:
    """A worker's last version: bound at 10:00; its container ended (finishedAt) or not; a
    deletionTimestamp or not."""
    state = ({"terminated": {"exitCode": 143, "reason": "Error", "finishedAt": finished_at}}
             if finished_at else {"running": {"startedAt": BOUND_AT}})
    meta: dict = {"uid": uid}
    if deleting_at:
        meta["deletionTimestamp"] = deleting_at
    return {"metadata": meta, "spec": {"nodeName": "tpu-node-0", "containers": TPU},
            "status": {"phase": phase, "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": BOUND_AT}],
                "containerStatuses": [{"name": "pathways-worker", "state": state}]}}


def _meter(clock: Clock, wall_now: str = "2026-12-04T12:00:00Z") -> SpendMeter:
    meter = SpendMeter("train", 8, 1.0, False, None, None, uuid.uuid4().hex, clock,
                       tail_s=600.0)
    meter.wall = lambda: _unix(wall_now)
    return meter


@pytest.mark.parametrize(("worker", "held_s"), [
    (_worker(finished_at="2026-12-04T10:30:00Z", deleting_at="2026-12-04T10:30:30Z"), 1799),
    (_worker(deleting_at="2026-12-04T10:20:00Z"), 1199),  # no finishedAt: its deletion
    (_worker(deleting_at="2026-12-04T11:00:00Z", phase="Running"), 3599),
], ids=["ended then deleted", "deleted, no end posted", "deleted while running"])
def test_a_slice_gone_between_two_looks_is_charged_once_from_its_last_version(
        worker: dict, held_s: int) -> None:
    """From the binding's second rounded up to the containers' end, or without one to the
    deletionTimestamp; once, whatever the later looks; the scale-down tail after it."""
    clock = Clock()
    meter = _meter(clock)
    meter.charge([HEAD, UNBOUND])
    clock.now = 7200.0
    meter.charge([HEAD], gone=[worker])
    assert meter.spent_usd == pytest.approx(8 * held_s / 3600)
    clock.now = 7260.0
    meter.charge([HEAD], gone=[worker])  # the same pod gone at the next look: nothing more
    meter.pause()
    assert meter.spent_usd == pytest.approx(8 * (held_s + 600) / 3600)


def test_a_deletion_whose_grace_period_has_not_run_out_is_charged_up_to_now() -> None:
    """deletionTimestamp is the end of the grace period (when the kubelet kills what is
    left), which may be after now: the charge stops at now."""
    clock = Clock()
    meter = _meter(clock, wall_now="2026-12-04T10:10:00Z")
    meter.charge([HEAD], gone=[_worker(deleting_at="2026-12-04T10:10:30Z", phase="Running")])
    assert meter.spent_usd == pytest.approx(8 * 599 / 3600)


def test_a_gone_pod_with_neither_end_nor_deletion_time_charges_nothing() -> None:
    """No end in its record: nothing is guessed."""
    clock = Clock()
    meter = _meter(clock)
    meter.charge([HEAD], gone=[_worker(phase="Running")])
    meter.pause()
    assert meter.spent_usd == 0.0


def test_a_slice_seen_holding_is_not_charged_again_when_it_goes() -> None:
    """Seen bound at a look: the ticks charge it; its deletion later adds nothing of its
    record (the ticks' time, and the tail at pause)."""
    clock = Clock()
    meter = _meter(clock, wall_now=BOUND_AT)
    running = _worker(phase="Running")
    meter.charge([HEAD, running])
    clock.now = 1800.0
    meter.charge([HEAD, running])
    clock.now = 1860.0
    meter.charge([HEAD], gone=[_worker(finished_at="2026-12-04T10:31:00Z")])
    assert meter.spent_usd == pytest.approx(8 * 1800 / 3600)


def test_bound_pods_keep_the_last_version_of_tpu_pods_that_were_bound() -> None:
    """Noted: every version the watch delivers; kept: TPU pods bound to a node, the last
    version of each; gone: those the API's list no longer has."""
    bound = BoundPods()
    for version in (HEAD, UNBOUND, _worker(phase="Running"), _worker(uid="w1", phase="Running"),
                    _worker(finished_at="2026-12-04T10:30:00Z")):
        bound.note(version)
    gone = bound.gone([_worker(uid="w1", phase="Running"), HEAD])
    assert [(p["metadata"]["uid"], p["status"]["phase"]) for p in gone] == [("w0", "Failed")]
    assert bound.gone([HEAD, _worker(), _worker(uid="w1")]) == []


def test_pods_without_a_uid_are_told_apart_by_namespace_and_name() -> None:
    """A copy without a uid (none the API serves, but the record must not merge two
    pods): its namespace and name identify it."""
    def copy(namespace: str, name: str) -> dict:
        return {"metadata": {"namespace": namespace, "name": name},
                "spec": {"nodeName": "tpu-node-0",
                         "containers": [{"resources": {"limits": {"google.com/tpu": "4"}}}]}}
    bound = BoundPods()
    pods = [copy("a", "worker-0"), copy("b", "worker-0"), copy("a", "worker-1")]
    for pod in pods:
        bound.note(pod)
    assert bound.gone([]) == pods
    assert bound.gone([copy("b", "worker-0")]) == [pods[0], pods[2]]


def test_a_pod_first_seen_running_at_a_later_look_is_charged_from_its_binding() -> None:
    """The first look's copy was older than the binding (the watch lagged): the pod's
    record charges from its binding's second up to that look, the tick from there on."""
    clock = Clock()
    meter = _meter(clock, wall_now="2026-12-04T10:02:00Z")  # bound 120 s before now
    meter.charge([HEAD, UNBOUND])  # clock 0: the first look, the copy still pending
    clock.now = 60.0
    meter.charge([HEAD, _worker(phase="Running")])
    assert meter.spent_usd == pytest.approx(8 * (59 + 60) / 3600)
