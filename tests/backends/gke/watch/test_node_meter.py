"""The spend meter by the run's TPU node lifetimes (flows/backends/gke/watch/tpu_nodes.py,
spend.py ``charge_nodes``): what GCP bills a TPU VM for, creation to deletion, whoever runs
on it. Pure calls with a wall clock the test moves; the nodes are the dicts the API returns
(creationTimestamp in whole seconds). Against the fake autoscaler, under faults:
tests/backends/gke/test_capacity_faults.py."""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable
from datetime import UTC, datetime

import pytest

from flows.backends.gke.capacity_pools import pool_node_labels
from flows.backends.gke.flow_pools import flow_account_id
from flows.backends.gke.watch.node_charges import scale_up_triggered_at
from flows.backends.gke.watch.spend import SpendMeter, meter_for, spent_in_run
from flows.backends.gke.watch.tpu_nodes import TpuNodes, belongs_to_run
from flows.backends.gke.watch.vm_created import (
    NODE_REGISTRATION,
    VM_CREATION,
    InstanceRef,
    InstanceUnreadable,
    VmCreations,
    instance_ref,
)
from flows.core.team_budget import stage_spent
from tests.fakes.cloud.instances import FakeInstances
from tests.fakes.kube_api.nodepools import TpuPool
from tests.fakes.kube_api.store import FakeKube
from tests.support.profiles import capacity_overrides, tutorial_profile

T0 = 1_800_000_000.0  # a whole second, as the API writes times


class Wall:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _stamp(wall: float) -> str:
    return datetime.fromtimestamp(wall, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _node(name: str, created: float, mode: str | None = "on-demand") -> dict:
    labels = {"cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
              **(pool_node_labels(mode) if mode else {})}
    return {"metadata": {"name": name, "uid": f"uid-{name}", "labels": labels,
                         "creationTimestamp": _stamp(created)}}


def _meter(wall: Wall, modes: frozenset[str] = frozenset({"on-demand"}), *,
           key: str | None = None, static: bool = False, usd: float = 1.0,
           prices: dict[str, float] | None = None,
           unlabelled: bool = True, tail_s: float = 0.0) -> tuple[SpendMeter, TpuNodes]:
    """A meter of a 16-chip slice (four nodes of four chips) whose clock is ``wall`` too."""
    meter = SpendMeter("train", 16, usd, static, None, None, key or uuid.uuid4().hex,
                       clock=wall, tail_s=tail_s, wall=wall)
    nodes = TpuNodes(functools.partial(belongs_to_run, modes=modes, unlabelled=unlabelled),
                     wall=wall)
    meter.attach_nodes(nodes, 4, prices or {})
    return meter, nodes


def test_a_node_is_charged_from_the_second_after_its_creation_to_when_it_went() -> None:
    wall = Wall()
    meter, nodes = _meter(wall)
    wall.now = T0 + 10
    nodes.seen([_node("a", T0 + 4)])  # created at T0 + 4 (whole seconds): from T0 + 5
    meter.charge_nodes()
    assert meter.spent_usd * 3600 == pytest.approx(4 * 5)
    wall.now = T0 + 30
    nodes.seen([])  # the watch shows it gone now
    wall.now = T0 + 100
    meter.charge_nodes()
    assert meter.spent_usd * 3600 == pytest.approx(4 * 25)  # to its end, not to now


def test_nodes_without_a_pod_are_charged_all_the_same() -> None:
    """The pod-based meter charged nothing for nodes no pod held: a slice whose JobSet was
    deleted mid scale-up, or the autoscaler's delay after the CPU pool's scale-up."""
    wall = Wall()
    meter, nodes = _meter(wall)
    wall.now = T0 + 60
    nodes.seen([_node(f"n{i}", T0 + 9) for i in range(4)])
    assert meter.charge([]) is None  # the monitor's tick, with no pod at all
    assert meter.spent_usd * 3600 == pytest.approx(4 * 4 * 50)


def test_a_node_charged_by_two_stages_is_paid_once() -> None:
    """Training's nodes are still there when the next stage's meter starts (the tail):
    each node-second is charged once per run, whichever meter sees it."""
    wall, key = Wall(), uuid.uuid4().hex
    train, train_nodes = _meter(wall, key=key)
    wall.now = T0 + 20
    train_nodes.seen([_node("a", T0)])
    train.charge_nodes()
    evaluate, evaluate_nodes = _meter(wall, key=key)
    wall.now = T0 + 50
    evaluate_nodes.seen([_node("a", T0)])
    train_nodes.seen([_node("a", T0)])
    evaluate.charge_nodes()
    train.charge_nodes()
    assert spent_in_run(key) * 3600 == pytest.approx(4 * 49)
    assert evaluate.spent_usd * 3600 == pytest.approx(4 * 30)


def _bound_pod(node: str, bound_at: float, phase: str = "Running") -> dict:
    """A worker of the JobSet on ``node``: it asks for TPU chips and was bound then."""
    return {"metadata": {"name": f"worker-{node}", "uid": f"pod-{node}"},
            "spec": {"nodeName": node,
                     "containers": [{"resources": {"limits": {"google.com/tpu": "4"}}}]},
            "status": {"phase": phase, "conditions": [
                {"type": "PodScheduled", "status": "True",
                 "lastTransitionTime": _stamp(bound_at)}]}}


SLICE = [f"n{i}" for i in range(4)]


def _tick(meter: SpendMeter, wall: Wall, seconds: range | tuple[int, ...]) -> list[dict]:
    """The monitor's ticks at ``T0 + second`` each, with the slice's four pods bound at
    T0 + 2; the pods."""
    pods = [_bound_pod(node, T0 + 2) for node in SLICE]
    for second in seconds:
        wall.now = T0 + second
        meter.charge(pods)
    return pods


def _later_stage_spent(wall: Wall, key: str) -> float:
    """What a later stage of the run, metered by its pods (no node watch), charges for a pod
    bound at T0 + 40 and ticked at T0 + 41 to T0 + 43, in chip-seconds."""
    later = SpendMeter("export", 16, 1.0, False, None, None, key, clock=wall, wall=wall)
    later_pods = [_bound_pod("m0", T0 + 40)]
    for second in (41, 42, 43):
        wall.now = T0 + second
        later.charge(later_pods)
    return later.spent_usd * 3600


def test_the_time_its_pods_were_charged_before_the_nodes_were_listed_is_charged_once() -> None:
    """The node watch's first list is refused for a while (the API failing at the stage's
    start) and the slice's pods bind meanwhile: their ticks charge the slice, so the caps
    hold, and once the nodes are listed their lifetimes charge the same seconds; the run,
    the stage and its record pay each second once."""
    wall, key = Wall(), uuid.uuid4().hex
    meter, nodes = _meter(wall, key=key)
    pods = _tick(meter, wall, range(3, 11))  # the nodes not listed yet
    assert meter.spent_usd * 3600 == pytest.approx(16 * 7)  # charged meanwhile
    nodes.seen([_node(node, T0 + 1) for node in SLICE])  # listed: created at T0 + 1
    meter.charge(pods)
    assert meter.spent_usd * 3600 == pytest.approx(16 * 8)  # from T0 + 2 to T0 + 10, once
    assert spent_in_run(key) * 3600 == pytest.approx(16 * 8)
    assert (stage_spent(key, "train") or 0.0) * 3600 == pytest.approx(16 * 8)
    wall.now = T0 + 20
    meter.charge(pods)
    assert meter.spent_usd * 3600 == pytest.approx(16 * 18)


def test_a_tail_guessed_before_the_nodes_were_listed_is_given_back_for_their_lifetimes(
        ) -> None:
    """A submission ends before the node watch has listed: the pods' record charges the
    scale-down tail it guesses. Once the nodes are listed their real lifetimes replace the
    guess, and the guess no longer counts as paid for a later stage that meters by pods."""
    wall, key = Wall(), uuid.uuid4().hex
    meter, nodes = _meter(wall, key=key, tail_s=600.0)
    _tick(meter, wall, (3, 4, 5))
    meter.pause()
    assert meter.spent_usd * 3600 == pytest.approx(16 * (2 + 600))  # the guessed tail
    wall.now = T0 + 30
    nodes.seen([_node(node, T0 + 1) for node in SLICE])  # listed, then removed at once
    nodes.seen([])
    meter.charge_nodes()
    assert meter.spent_usd * 3600 == pytest.approx(16 * 28)  # the lifetimes, to T0 + 30
    assert _later_stage_spent(wall, key) == pytest.approx(16 * 2)


def test_a_node_gone_before_the_list_keeps_its_share_of_the_pods_charges() -> None:
    """Half the slice's nodes went before the node watch listed (their lifetimes are
    unknown to it): the pods' charges are given back for the two it shows and kept for
    the two it never saw."""
    wall, key = Wall(), uuid.uuid4().hex
    meter, nodes = _meter(wall, key=key)
    _tick(meter, wall, range(3, 11))
    nodes.seen([_node(node, T0 + 1) for node in SLICE[:2]])
    meter.charge_nodes()
    assert meter.spent_usd * 3600 == pytest.approx(16 * 7 / 2 + 2 * 4 * 8)


def test_a_tail_guessed_for_nodes_the_list_never_showed_stays_charged_and_paid_for(
        ) -> None:
    """The slice's nodes were gone before the node watch listed: the tail the pods'
    record guessed is all the run knows of them, so it stays charged, and a later stage
    metered by its pods does not charge that time again."""
    wall, key = Wall(), uuid.uuid4().hex
    meter, nodes = _meter(wall, key=key, tail_s=600.0)
    _tick(meter, wall, (3, 4, 5))
    meter.pause()
    wall.now = T0 + 30
    nodes.seen([])
    meter.charge_nodes()
    assert meter.spent_usd * 3600 == pytest.approx(16 * (2 + 600))
    assert _later_stage_spent(wall, key) == 0.0


class _ListedDuringTheCheck(TpuNodes):
    """Nodes whose watch lists while the monitor checks them: the read of ``synced`` that
    ``list_on_read`` numbers runs ``listed`` (the watch's thread charging) and still
    answers False, as the monitor read it just before (the two threads race so)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        self.reads, self.list_on_read, self.is_listed = 0, 0, False
        self.listed: Callable[[], object] = lambda: None
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    @property  # type: ignore[override]
    def synced(self) -> bool:
        self.reads += 1
        if self.reads == self.list_on_read:
            self.is_listed = True
            self.listed()
            return False
        return self.is_listed

    @synced.setter
    def synced(self, value: bool) -> None:
        pass


def test_a_pods_charge_made_as_the_nodes_were_listed_is_given_back_at_the_next_charge(
        ) -> None:
    wall, key = Wall(), uuid.uuid4().hex
    meter = SpendMeter("train", 16, 1.0, False, None, None, key, clock=wall, wall=wall)
    nodes = _ListedDuringTheCheck(functools.partial(
        belongs_to_run, modes=frozenset({"on-demand"}), unlabelled=True), wall=wall)
    meter.attach_nodes(nodes, 4, {})
    pods = _tick(meter, wall, (2, 3))  # reads 1 and 2: charged by the pods, provisionally
    nodes.seen([_node(node, T0 + 1) for node in SLICE])
    nodes.list_on_read, nodes.listed = 3, meter.charge_nodes
    wall.now = T0 + 4
    meter.charge(pods)  # read 3: the watch settles and charges the lifetimes, the tick the pods
    assert meter.spent_usd * 3600 == pytest.approx(16 * 3)  # the last second twice, for now
    meter.charge_nodes()  # the watch's next change, or the next tick
    assert meter.spent_usd * 3600 == pytest.approx(16 * 2)
    assert spent_in_run(key) * 3600 == pytest.approx(16 * 2)


def test_a_node_paid_up_to_now_does_not_keep_the_others_from_being_charged() -> None:
    wall = Wall()
    meter, nodes = _meter(wall)
    wall.now = T0 + 10
    nodes.seen([_node("a", T0)])
    nodes.seen([])  # a went at T0 + 10
    meter.charge_nodes()
    wall.now = T0 + 20
    nodes.seen([_node("b", T0 + 9)])
    meter.charge_nodes()  # a: nothing left to charge; b: from T0 + 10
    assert meter.spent_usd * 3600 == pytest.approx(4 * 9 + 4 * 10)


def test_a_node_watch_that_never_lists_leaves_the_pods_charges() -> None:
    """A cluster whose RBAC refuses the node list: the pods' record is all the meter has,
    and what it charged stays charged."""
    wall, key = Wall(), uuid.uuid4().hex
    meter, _nodes = _meter(wall, key=key)
    _tick(meter, wall, range(3, 11))
    meter.pause()
    assert meter.charge_nodes() is None
    assert spent_in_run(key) * 3600 == pytest.approx(16 * 7)


def test_a_node_older_than_the_meter_is_charged_from_the_meters_start() -> None:
    wall = Wall(T0 + 100)
    meter, nodes = _meter(wall)
    wall.now = T0 + 160
    nodes.seen([_node("left-by-another-run", T0)])
    meter.charge_nodes()
    assert meter.spent_usd * 3600 == pytest.approx(4 * 60)


def test_each_node_at_its_pools_mode_price() -> None:
    wall = Wall()
    meter, nodes = _meter(wall, frozenset({"spot", "on-demand"}), usd=9.0,
                          prices={"spot": 1.0, "on-demand": 3.0})
    wall.now = T0 + 3601
    nodes.seen([_node("s", T0, "spot"), _node("o", T0, "on-demand")])
    meter.charge_nodes()
    assert meter.spent_usd == pytest.approx(4 * 1.0 + 4 * 3.0)


def test_nodes_of_other_pools_are_not_the_runs() -> None:
    wall = Wall()
    meter, nodes = _meter(wall, frozenset({"on-demand"}), unlabelled=False)
    wall.now = T0 + 61
    nodes.seen([_node("res", T0, "reservation"), _node("bare", T0, None),
                _node("od", T0, "on-demand")])
    meter.charge_nodes()
    assert meter.spent_usd * 3600 == pytest.approx(4 * 60)  # the on-demand node only


def test_a_chain_from_a_reservation_meters_the_later_steps_at_their_own_prices() -> None:
    """reservation, then on-demand: the static pool bills on at the reservation's price,
    and the on-demand step's nodes at on-demand's, by their lifetimes."""
    profile = tutorial_profile(**capacity_overrides("reservation,on-demand"),
                               **{"gke.max_usd_per_run": "900"})
    meter = meter_for(profile, "train", key=uuid.uuid4().hex)
    assert meter is not None and meter.static_pool
    gke = profile.gke
    assert gke is not None
    assert meter.node_prices == {"on-demand": gke.mode_usd_per_chip_hour("on-demand")}
    assert meter.tail_s == 1200.0  # the on-demand pool's nodes are watched after the stage
    wall = Wall()
    meter.wall = wall
    nodes = TpuNodes(functools.partial(belongs_to_run, modes=frozenset({"on-demand"}),
                                       unlabelled=False), wall=wall)
    meter.attach_nodes(nodes, 4, meter.node_prices)
    wall.now = T0 + 3601
    nodes.seen([_node("od", T0, "on-demand"), _node("res", T0, "reservation")])
    meter.charge_nodes()
    assert meter.spent_usd == pytest.approx(4 * gke.mode_usd_per_chip_hour("on-demand"))


def test_the_last_triggered_scale_up_of_the_jobsets_pods_is_read_from_the_events() -> None:
    events = [{"reason": "TriggeredScaleUp", "involvedObject": {"name": "train-x-worker-0-0"},
               "lastTimestamp": _stamp(T0 + 5)},
              {"reason": "TriggeredScaleUp", "involvedObject": {"name": "other-worker-0-0"},
               "lastTimestamp": _stamp(T0 + 9)},
              {"reason": "FailedScaleUp", "involvedObject": {"name": "train-x-worker-0-1"},
               "lastTimestamp": _stamp(T0 + 7)}]
    assert scale_up_triggered_at(events, "train-x") == T0 + 5
    assert scale_up_triggered_at(events[1:], "train-x") is None


def test_a_node_created_in_the_triggers_second_counts_as_its_scale_ups() -> None:
    wall = Wall(T0 + 30)
    _, nodes = _meter(wall)
    nodes.seen([_node("old", T0 + 4)])
    assert not nodes.created_since(T0 + 5)
    nodes.seen([_node("old", T0 + 4), _node("new", T0 + 5)])
    assert nodes.created_since(T0 + 5)


# --- from the VM's creation (watch/vm_created.py), the fake instances.get over a FakeKube


def _vm_meter(wall: Wall, kube: FakeKube, instances: FakeInstances
              ) -> tuple[SpendMeter, TpuNodes, list[str]]:
    """A meter whose nodes read their VMs through ``instances``; the warnings it gave."""
    warned: list[str] = []
    meter = SpendMeter("train", 16, 1.0, False, None, None, uuid.uuid4().hex, wall=wall)
    vms = VmCreations(instances, warned.append, "tpurl-flow")
    nodes = TpuNodes(functools.partial(belongs_to_run, modes=frozenset({"on-demand"}),
                                       unlabelled=True), wall=wall, vm_created=vms.created)
    meter.attach_nodes(nodes, 4, {})
    return meter, nodes, warned


def _gke_node(kube: FakeKube, name: str, registered: float, project: str | None = "p") -> dict:
    """A node as the fake autoscaler makes it (its pool's spec, providerID with a project)."""
    pool = TpuPool(name="gke-tpu-v6e-on-demand-us-east5-b", zone="us-east5-b",
                   labels=pool_node_labels("on-demand"), gce_project=project)
    return kube.create("nodes", "", {"metadata": {"name": name, "labels": pool.node_labels()},
                                     "spec": pool.node_spec(name)}, _stamp(registered))


def test_a_node_is_charged_from_its_vms_creation_a_boot_before_it_registered() -> None:
    wall, kube = Wall(), FakeKube()
    instances = FakeInstances(kube, boot_s=90.0)
    meter, nodes, warned = _vm_meter(wall, kube, instances)
    node = _gke_node(kube, "gke-tpu-a", T0 + 100)
    wall.now = T0 + 160
    nodes.seen([node])
    meter.charge_nodes()
    assert meter.spent_usd * 3600 == pytest.approx(4 * (160 - 10))  # from T0 + 10, not + 101
    (life,) = nodes.lifetimes()
    assert (life.since, life.created, life.registered) == (VM_CREATION, T0 + 10, T0 + 101)
    nodes.seen([node])  # seen again: the VM is read once
    assert warned == [] and len(instances.calls) == 1
    assert not nodes.created_since(T0 + 101) and nodes.created_since(T0 + 100)  # registration


def test_a_vm_created_before_the_meter_started_is_charged_from_the_meters_start() -> None:
    wall, kube = Wall(T0 + 50), FakeKube()
    meter, nodes, _ = _vm_meter(wall, kube, FakeInstances(kube, boot_s=120.0))
    node = _gke_node(kube, "gke-tpu-a", T0 + 60)  # its VM: T0 - 60, before the window
    wall.now = T0 + 80
    nodes.seen([node])
    meter.charge_nodes()
    assert meter.spent_usd * 3600 == pytest.approx(4 * 30)


def test_an_unreadable_vm_leaves_each_node_charged_from_its_registration_said_once() -> None:
    wall, kube = Wall(), FakeKube()
    instances = FakeInstances(kube, denied=True)
    meter, nodes, warned = _vm_meter(wall, kube, instances)
    both = [_gke_node(kube, f"gke-tpu-{i}", T0 + 100) for i in range(2)]
    wall.now = T0 + 161
    nodes.seen(both)
    meter.charge_nodes()
    assert meter.spent_usd * 3600 == pytest.approx(2 * 4 * 60)  # from T0 + 101
    assert {life.since for life in nodes.lifetimes()} == {NODE_REGISTRATION}
    assert len(instances.calls) == 1 and len(warned) == 1  # given up after the denial
    assert "compute.instances.get" in warned[0] and "registration" in warned[0]


@pytest.mark.parametrize("provider", [None, "kind://docker/kind/kind-worker",
                                      "gce://p/us-east5-b/../../other/x", "gce://p/zone-only"])
def test_a_node_without_a_gce_vm_is_charged_from_its_registration_unasked(provider) -> None:
    wall, kube = Wall(), FakeKube()
    instances = FakeInstances(kube)
    meter, nodes, warned = _vm_meter(wall, kube, instances)
    node = _gke_node(kube, "gke-tpu-a", T0 + 100, project=None)
    if provider:
        node["spec"]["providerID"] = provider
    wall.now = T0 + 161
    nodes.seen([node])
    meter.charge_nodes()
    assert meter.spent_usd * 3600 == pytest.approx(4 * 60)
    assert instances.calls == [] and warned == []
    assert instance_ref(node) is None


def test_a_vm_already_gone_leaves_its_node_charged_from_its_registration() -> None:
    wall, kube = Wall(), FakeKube()
    instances = FakeInstances(kube)
    meter, nodes, warned = _vm_meter(wall, kube, instances)
    node = _gke_node(kube, "gke-tpu-a", T0 + 100)
    kube.delete("nodes", "", "gke-tpu-a")  # instances.get answers 404
    wall.now = T0 + 161
    nodes.seen([node])
    meter.charge_nodes()
    assert meter.spent_usd * 3600 == pytest.approx(4 * 60)
    assert len(instances.calls) == 1 and warned == []


def test_the_instance_is_read_from_the_nodes_provider_id() -> None:
    node = {"spec": {"providerID": "gce://my-project/us-east5-b/gke-tpu-v6e-pool-1a2b-xyz"}}
    assert instance_ref(node) == InstanceRef("my-project", "us-east5-b",
                                             "gke-tpu-v6e-pool-1a2b-xyz")


class _Answer:
    def __init__(self, status: int, body: object = None) -> None:
        self.status_code, self._body = status, body

    def json(self) -> object:
        return self._body


class _Session:
    """What RestInstances calls: ``get(url, timeout=...)``; records the URLs."""

    def __init__(self, answer: _Answer | Exception) -> None:
        self.answer, self.urls, self.timeouts = answer, [], []

    def get(self, url: str, timeout: float) -> _Answer:
        self.urls.append(url)
        self.timeouts.append(timeout)
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def test_the_rest_lookup_reads_the_instance_and_tells_a_404_from_a_refusal() -> None:
    from flows.backends.gke.watch.vm_created import InstanceUnreadable, RestInstances
    ref = InstanceRef("p", "us-east5-b", "gke-tpu-a")
    found = _Session(_Answer(200, {"creationTimestamp": "2026-12-06T08:00:00.123-08:00"}))
    assert RestInstances(session=found)(ref) == {"creationTimestamp":
                                                 "2026-12-06T08:00:00.123-08:00"}
    assert found.urls == ["https://compute.googleapis.com/compute/v1/projects/p/zones/"
                          "us-east5-b/instances/gke-tpu-a"]
    assert RestInstances(session=_Session(_Answer(404)))(ref) is None
    assert found.timeouts == [10.0]  # a hung API holds the meter's thread 10 s, not forever
    for refused, said in ((_Answer(403), "HTTP 403 from instances.get"),
                          (_Answer(400), "HTTP 400 from instances.get"),
                          (_Answer(503), "HTTP 503 from instances.get"),
                          (ConnectionError("reset"), "ConnectionError")):
        with pytest.raises(InstanceUnreadable) as raised:
            RestInstances(session=_Session(refused))(ref)
        assert str(raised.value) == said
    assert RestInstances(session=_Session(_Answer(399, {"a": 1})))(ref) == {"a": 1}
    assert RestInstances(session=_Session(_Answer(200, ["not", "an", "instance"])))(ref) is None


def test_each_vm_is_read_once_by_its_own_place_and_a_refusal_stops_every_read() -> None:
    """The reads VmCreations makes: one per VM, keyed by project, zone and name (two VMs of
    one name in two zones are two VMs); after a refusal none, every later node answered
    from its registration; the one warning names the grant that lifts it."""
    calls: list[InstanceRef] = []
    created = {("p", "z1", "vm"): "2026-12-06T10:00:00Z", ("p", "z2", "vm"): None,
               ("q", "z1", "vm"): "2026-12-06T11:00:00Z"}

    def get(ref: InstanceRef) -> dict | None:
        calls.append(ref)
        if ref.project == "denied":
            raise InstanceUnreadable("HTTP 403 from instances.get")
        stamp = created[(ref.project, ref.zone, ref.name)]
        return {"creationTimestamp": stamp} if stamp else None

    def node(project: str, zone: str) -> dict:
        return {"metadata": {"name": "n"}, "spec": {"providerID": f"gce://{project}/{zone}/vm"}}

    warned: list[str] = []
    vms = VmCreations(get, warned.append, "tpurl-flow")
    ten = datetime(2026, 12, 6, 10, tzinfo=UTC).timestamp()
    assert vms.created(node("p", "z1")) == ten
    assert vms.created(node("p", "z1")) == ten  # answered from what it read
    assert vms.created(node("p", "z2")) is None  # gone (404): remembered as such
    assert vms.created(node("p", "z2")) is None
    assert vms.created(node("q", "z1")) == ten + 3600
    assert [(r.project, r.zone) for r in calls] == [("p", "z1"), ("p", "z2"), ("q", "z1")]
    assert vms.created(node("denied", "z1")) is None
    assert vms.created(node("denied", "z9")) is None and vms.created(node("q", "z3")) is None
    assert len(calls) == 4 and vms.created(node("p", "z1")) == ten  # known before: kept
    assert warned == [
        "the TPU VMs' creation times cannot be read (HTTP 403 from instances.get); the spend "
        "meter charges each TPU node from its registration, which comes after its VM's boot, "
        "so it under-charges by the boot. To charge from the VM's creation, let the identity "
        "the flow runs as read the instances: gcloud projects add-iam-policy-binding denied "
        "--member=serviceAccount:tpurl-flow@denied.iam.gserviceaccount.com "
        "--role=roles/compute.viewer (it holds compute.instances.get)"]


def test_the_warning_names_the_account_the_teams_flow_runs_as() -> None:
    """A team's flow pod runs as the team's own Google account (flow_pools, decision 0039):
    the grant the warning gives is that account's, the one ``tpurl flow-identity`` made,
    not the team-less ``tpurl-flow``."""
    def refused(ref: InstanceRef) -> dict | None:
        raise InstanceUnreadable("HTTP 403 from instances.get")

    for team, member in (("research", "tpurl-flow-research@p.iam"),
                         (None, "tpurl-flow@p.iam")):
        warned: list[str] = []
        node = {"metadata": {"name": "n"}, "spec": {"providerID": "gce://p/z1/vm"}}
        assert VmCreations(refused, warned.append, flow_account_id(team)).created(node) is None
        assert len(warned) == 1 and f"--member=serviceAccount:{member}" in warned[0], warned
