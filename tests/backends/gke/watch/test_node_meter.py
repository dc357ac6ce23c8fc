"""The spend meter by the run's TPU node lifetimes (flows/backends/gke/watch/tpu_nodes.py,
spend.py ``charge_nodes``): what GCP bills a TPU VM for, creation to deletion, whoever runs
on it. Pure calls with a wall clock the test moves; the nodes are the dicts the API returns
(creationTimestamp in whole seconds). Against the fake autoscaler, under faults:
tests/backends/gke/test_capacity_faults.py."""

from __future__ import annotations

import functools
import uuid
from datetime import UTC, datetime

import pytest

from flows.backends.gke.capacity_pools import pool_node_labels
from flows.backends.gke.watch.node_charges import scale_up_triggered_at
from flows.backends.gke.watch.spend import SpendMeter, meter_for, spent_in_run
from flows.backends.gke.watch.tpu_nodes import TpuNodes, belongs_to_run
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
           unlabelled: bool = True) -> tuple[SpendMeter, TpuNodes]:
    meter = SpendMeter("train", 16, usd, static, None, None, key or uuid.uuid4().hex,
                       wall=wall)
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
