"""The run's TPU nodes as a node watch sees them: when each was created and when it went, which
is what Compute Engine bills a TPU VM for.

Why nodes, not the pods bound to them: GCP bills a VM from RUNNING to its deletion, whoever
runs on it. The cluster autoscaler creates a slice's nodes for pending TPU pods and keeps
them after the pods are gone: it removes a node only once it has been unneeded for
``--scale-down-unneeded-time`` and no scale-up anywhere in the cluster happened within
``--scale-down-delay-after-add`` (both 10 min by default: kubernetes/autoscaler
cluster-autoscaler/main.go flags; core/static_autoscaler.go RunOnce updates the unneeded
nodes every loop, then skips the removal while ``lastScaleUpTime + ScaleDownDelayAfterAdd``
is after now). The CPU pool's scale-up for the next stage lands right after training, so
that delay runs out after the TPU pods ended. A scale-up that was triggered goes on after
its JobSet is deleted (a fallback, a cap, Ctrl-C): the autoscaler resized the node group and
the VMs come up all the same, idle, until removed as unneeded. None of that has a pod.

Which nodes are the run's: those carrying its TPU pools' labels, the accelerator GKE puts on
every TPU node and ``tpurl/capacity`` of a mode of the chain that scales from zero
(flows/backends/gke/capacity_pools.py); a node without our label (a lone pool deployed
before it existed) is the run's when the profile scales from zero at all. One profile's
cluster runs one run at a time (the profile lock), so every such node is this run's. A node
created before the meter started is charged from the meter's start: its earlier life was
another run's.

A node is charged from its VM's creation when that can be read (watch/vm_created.py: the
boot before the node registers is billed too), else from its registration, and its lifetime
says which (``Lifetime.since``).

Times are wall-clock Unix seconds: a VM's creationTimestamp (milliseconds), or a node's
(whole seconds, so its creation is taken one second later, never charging a second it did
not exist) and, for its
end, the moment the watch first saw it gone (a DELETED event, or a relist without it): no
earlier than the deletion, by the watch's delay. Pure but for the clock; the watch thread
feeds it, the monitor's ticks read it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from flows.backends.gke.capacity_pools import CAPACITY_LABEL
from flows.backends.gke.watch.api_time import api_time
from flows.backends.gke.watch.stream import Lister, ObjectWatch, WatchSettings
from flows.backends.gke.watch.vm_created import NODE_REGISTRATION, VM_CREATION
from flows.common.api_objects import Obj

log = logging.getLogger(__name__)
TPU_ACCELERATOR_LABEL = "cloud.google.com/gke-tpu-accelerator"
# the node watches kept after their stage, so a process that outlives its runs (a test
# session, a worker serving runs in-process) can end them rather than let them poll an API
# that may be gone: see ``end_tails``
_TAILS: set[NodeWatch] = set()
_TAILS_LOCK = threading.Lock()


@dataclass(frozen=True)
class Lifetime:
    """One node's life as seen: created (wall: its VM's creation or its registration, as
    ``since`` says), gone (wall; None while it exists), its mode."""

    name: str
    created: float
    gone: float | None
    mode: str
    since: str = NODE_REGISTRATION
    registered: float | None = None  # the node's registration (wall), when ``since`` is not



def run_node_selector(accelerator: str) -> str:
    """The label selector the node watch lists with: every TPU node of the slice's kind (the
    capacity label is checked per node: a selector cannot say "one of these modes" to every
    API server the same way)."""
    return f"{TPU_ACCELERATOR_LABEL}={accelerator}"


def belongs_to_run(node: Obj, modes: frozenset[str], unlabelled: bool) -> bool:
    """A node of one of the run's pools: its ``tpurl/capacity`` is a metered mode, or it has
    none and ``unlabelled`` (the profile scales from zero, so its lone pool is the run's)."""
    mode = ((node.get("metadata") or {}).get("labels") or {}).get(CAPACITY_LABEL)
    return mode in modes if mode is not None else unlabelled


def _key(node: Obj) -> str:
    meta = node.get("metadata") or {}
    return str(meta.get("uid") or meta.get("name"))


class TpuNodes:
    """Every run node the watch has shown, with its lifetime so far."""

    def __init__(self, belongs: Callable[[Obj], bool],
                 wall: Callable[[], float] = time.time,
                 vm_created: Callable[[Obj], float | None] | None = None) -> None:
        """``vm_created``: a node's VM creation (watch/vm_created.py ``VmCreations``), None
        when unknown; without it every node is charged from its registration."""
        self.belongs, self.wall, self.vm_created = belongs, wall, vm_created
        self._lives: dict[str, Lifetime] = {}
        self._lock = threading.Lock()
        self.synced = False  # a first list arrived: absence means gone

    def seen(self, nodes: list[Obj]) -> None:
        """The watch's current copies (after every change): new nodes start, missing ones
        end now."""
        now = self.wall()
        ours = [node for node in nodes if self.belongs(node)]
        with self._lock:
            new = [node for node in ours if _key(node) not in self._lives]
        # the VMs are read outside the lock (an API call), once per new node
        vms = {_key(node): self.vm_created(node) if self.vm_created else None for node in new}
        with self._lock:
            here = set()
            for node in ours:
                meta = node.get("metadata") or {}
                key = _key(node)
                here.add(key)
                if key not in self._lives:
                    created = api_time(meta.get("creationTimestamp"))
                    # whole seconds: a node created at t existed from some time in [t, t + 1)
                    start = now if created is None else min(created + 1.0, now)
                    vm, since, registered = vms.get(key), NODE_REGISTRATION, None
                    if vm is not None:
                        start, since, registered = min(vm, start), VM_CREATION, start
                    mode = str((meta.get("labels") or {}).get(CAPACITY_LABEL, ""))
                    self._lives[key] = Lifetime(str(meta.get("name")), start, None, mode,
                                                since, registered)
            for key, life in list(self._lives.items()):
                if life.gone is None and key not in here:
                    self._lives[key] = Lifetime(life.name, life.created, now, life.mode,
                                                life.since, life.registered)
            self.synced = True

    def lifetimes(self) -> list[Lifetime]:
        with self._lock:
            return list(self._lives.values())

    def created_since(self, wall: float) -> bool:
        """A node created in or after the second ``wall`` (the events' whole seconds; a
        node's start is its creationTimestamp + 1, so strictly later). Its registration, not
        its VM's creation: the VM may be made within the second before the autoscaler's
        event is stamped."""
        with self._lock:
            return any((life.created if life.registered is None else life.registered) > wall
                       for life in self._lives.values())

    def any_live(self) -> bool:
        with self._lock:
            return any(life.gone is None for life in self._lives.values())


class NodeWatch:
    """Lists and watches the run's TPU nodes into ``nodes`` and calls ``on_seen`` after each
    change (the meter charges then, so the nodes are charged between submissions and after
    the stage too, when no monitor ticks). ``linger`` keeps it after the stage: the nodes
    are billed until the autoscaler removes them, so they are watched until none lives, or
    for at most the teardown tail the plan counts (then what is left is reported)."""

    def __init__(self, nodes: TpuNodes, lister: Lister, settings: WatchSettings,
                 warn: Callable[[str], None], on_seen: Callable[[], object]) -> None:
        self.nodes, self.on_seen, self.warn = nodes, on_seen, warn
        self.watch = ObjectWatch("tpu-nodes", lister, self._changed, settings, warn)
        self._ended = threading.Event()  # set by ``end_tails``: charge now and stop

    def _changed(self) -> None:
        self.nodes.seen(self.watch.snapshot())
        self.on_seen()

    def start(self) -> NodeWatch:
        self.watch.start()
        return self

    def stop(self) -> None:
        self.watch.stop()

    def linger(self, bound_s: float, poll_s: float,
               expected_after: float | None = None) -> threading.Thread:
        """After the stage: charge on until no run node lives or ``bound_s`` has passed;
        ``expected_after``: a scale-up was triggered then (wall-clock), so until a node
        created since then has come and gone, too."""
        def waiting() -> bool:
            return self.nodes.any_live() or (expected_after is not None and
                                             not self.nodes.created_since(expected_after))

        def until_gone() -> None:
            deadline = time.monotonic() + bound_s
            while waiting() and time.monotonic() < deadline:
                if self._ended.wait(poll_s):
                    break
            try:
                if self.nodes.any_live():
                    live = sorted(life.name for life in self.nodes.lifetimes()
                                  if life.gone is None)
                    when = ("when the run ended" if self._ended.is_set() else
                            f"{bound_s / 60:g} min after the stage")
                    self.warn(f"TPU nodes {', '.join(live)} still exist {when}: charged up to "
                              "now, no longer watched; the autoscaler removes idle ones (`tpurl "
                              "status PROFILE` shows what the pools hold)")
                self.on_seen()
            except Exception:  # the run's logger may be gone by now: the charge is kept
                log.debug("the TPU nodes' last charge after the stage failed", exc_info=True)
            finally:
                self.stop()
                with _TAILS_LOCK:
                    _TAILS.discard(self)
        with _TAILS_LOCK:
            _TAILS.add(self)
        thread = threading.Thread(target=until_gone, daemon=True, name="tpu-nodes-tail")
        thread.start()
        return thread


def end_tails(join_s: float = 5.0) -> int:
    """End every node watch still kept after its stage: each charges what it saw up to now,
    reports the nodes still alive, and stops. Why: a tail polls the cluster's API for up to
    the teardown tail; a process that goes on after the run (the next run served in the same
    process, a test session whose fake API server is gone) must not keep them polling.
    Returns how many were ended."""
    with _TAILS_LOCK:
        tails = list(_TAILS)
    for tail in tails:
        tail._ended.set()
    deadline = time.monotonic() + join_s
    for tail in tails:
        while tail in _TAILS and time.monotonic() < deadline:
            time.sleep(0.01)
    return len(tails)
