"""Where a slice came up, read from its nodes (flows/backends/gke/watch/served.py), and the
line the run log gets, whether the nodes could be read or not."""

from __future__ import annotations

import pytest

from flows.backends.gke.watch.served import (
    NODE_POOL,
    TPU_ACCELERATOR,
    ZONE,
    Served,
    served_by,
    tpu_node_names,
)


def _node(zone: str, pool: str, **marks: str) -> dict:
    return {"metadata": {"labels": {ZONE: zone, NODE_POOL: pool, **marks}}}


def _pod(node: str, scheduled: bool = True) -> dict:
    return {"metadata": {"name": f"worker-{node}"},
            "spec": {"nodeName": node, "nodeSelector": {TPU_ACCELERATOR: "tpu-v6e-slice"}},
            "status": {"conditions": [{"type": "PodScheduled",
                                       "status": "True" if scheduled else "False"}]}}


@pytest.mark.parametrize(("marks", "mode"), [
    ({}, "on-demand"), ({"cloud.google.com/gke-spot": "true"}, "spot"),
    ({"cloud.google.com/gke-flex-start": "true"}, "flex-start"),
    ({"cloud.google.com/gke-queued": "true", "cloud.google.com/gke-spot": "true"}, "queued"),
    ({"cloud.google.com/reservation-name": "r"}, "reservation")])
def test_the_slice_is_placed_by_its_nodes_labels(marks: dict[str, str], mode: str) -> None:
    served = served_by([_node("us-east5-b", "tpu-pool", **marks)] * 8)
    assert served == Served("us-east5-b", mode, "tpu-pool", 8)
    assert served.line() == (f"the slice came up in zone us-east5-b ({mode}, node pool "
                             "tpu-pool, 8 node(s))")


def test_no_node_read_says_so_rather_than_blanks() -> None:
    assert served_by([]) is None
    line = Served("", "", "", 8).line()
    assert line == ("the slice came up on 8 node(s); reading them failed, so its zone, "
                    "capacity mode and node pool are not known")


def test_a_node_without_zone_or_pool_labels_shows_what_is_known() -> None:
    served = served_by([{"metadata": {"labels": {}}}])
    assert served is not None
    assert served.line() == "the slice came up in zone ? (on-demand, node pool ?, 1 node(s))"


def test_the_nodes_are_named_once_every_tpu_pod_is_bound() -> None:
    assert tpu_node_names([_pod("a"), _pod("b")]) == {"a", "b"}
    assert tpu_node_names([_pod("a"), _pod("b", scheduled=False)]) is None
    assert tpu_node_names([]) is None
