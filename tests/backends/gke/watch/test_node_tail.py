"""The node watch kept after a stage: it ends when asked, charging what it saw and naming the
nodes still alive, rather than polling an API that is gone for the rest of the tail."""

from __future__ import annotations

import threading
import time

from flows.backends.gke.watch.stream import WatchSettings
from flows.backends.gke.watch.tpu_nodes import NodeWatch, TpuNodes, end_tails


def _refused(**_: object) -> object:
    raise ConnectionRefusedError(111, "Connection refused")  # the API server is gone


def test_a_kept_node_watch_ends_on_request_with_its_last_charge_and_the_nodes_left() -> None:
    nodes = TpuNodes(lambda _node: True)
    nodes.seen([{"metadata": {"name": "gke-tpu-a1", "uid": "1"}}])  # alive when the stage ended
    warnings: list[str] = []
    charges: list[float] = []
    watch = NodeWatch(nodes, _refused, WatchSettings(backoff_s=0.05), warnings.append,
                      lambda: charges.append(time.monotonic())).start()
    tail = watch.linger(bound_s=1200.0, poll_s=30.0)
    time.sleep(0.2)
    assert tail.is_alive()  # a 20-minute tail, polled every 30 s

    began = time.monotonic()
    assert end_tails() == 1
    tail.join(2.0)
    assert not tail.is_alive() and time.monotonic() - began < 2.0
    assert charges, "the last charge was not made"
    assert any("gke-tpu-a1 still exist when the run ended" in line for line in warnings), warnings
    assert not any(t.name == "watch-tpu-nodes" and t.is_alive() for t in threading.enumerate())
    assert end_tails() == 0  # nothing is kept any more


def test_a_tail_whose_nodes_are_gone_ends_by_itself_and_is_not_kept() -> None:
    nodes = TpuNodes(lambda _node: True)
    nodes.seen([])
    watch = NodeWatch(nodes, _refused, WatchSettings(backoff_s=0.05), lambda _l: None,
                      lambda: None).start()
    watch.linger(bound_s=1200.0, poll_s=0.05).join(2.0)
    assert end_tails() == 0
