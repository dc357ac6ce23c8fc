"""`tpurl status PROFILE`: what exists now for a GKE profile and what it costs per hour.

It answers "am I paying for something right now?" from read-only calls only (the GKE API's
cluster, the Kubernetes API's nodes and JobSets, the bucket's listing): it is safe to run at
any time, from anywhere the profile's credentials work. The exit code is 1 when a static TPU
pool exists in a capacity mode that should have none (on-demand, spot, flex-start scale from
zero): that pool bills every chip, every hour, busy or not. The TPU price is the profile's
(gke.prices); CPU nodes and the cluster fee are listed, not priced.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from flows.common.api_objects import Obj
from flows.config.gke import GkeSection
from flows.config.gke_section import gke_section
from flows.config.profile import Profile

NODE_POOL_LABEL = "cloud.google.com/gke-nodepool"
STAGE_LABEL = "tpurl/stage"
EXIT_STATIC_POOL = 1


@dataclass(frozen=True)
class PoolNow:
    name: str
    machine_type: str
    static: bool
    configured: str  # "2 nodes" or "0..2 nodes"
    nodes_now: int | None  # from the Kubernetes API; None: not reachable
    chips_per_node: int
    usd_per_hour: float  # TPU chips billed now at the price of the pool's own capacity mode
    capacity: str = "on-demand"  # what the pool bills as (cluster.live_capacity)


@dataclass(frozen=True)
class JobSetNow:
    name: str
    stage: str
    state: str  # queued | running | completed | failed
    since: str  # creationTimestamp


@dataclass
class Snapshot:
    cluster: str | None  # status of the cluster, None: there is none
    pools: list[PoolNow] = field(default_factory=list)
    cpu_nodes: int | None = None
    jobsets: list[JobSetNow] = field(default_factory=list)
    bucket_bytes: int | None = None  # None: no bucket
    bucket_objects: int = 0
    unreachable: list[str] = field(default_factory=list)  # what could not be read, and why
    # gke.reservation's hosts (count, in use); None: no reservation named or none found
    reservation_hosts: tuple[int, int] | None = None
    reservation_usd_per_hour: float = 0.0  # its unused hosts: billed too, consumed or not

    @property
    def usd_per_hour(self) -> float:
        return sum(p.usd_per_hour for p in self.pools) + self.reservation_usd_per_hour


def chips_per_node(pool: Obj) -> int:
    """A node pool's TPU chips per node, by its machine type (0: not a TPU pool)."""
    from flows.config.tpu import TPU_MACHINES

    machine = TPU_MACHINES.get(str((pool.get("config") or {}).get("machineType", "")))
    return machine.chips_per_host if machine else 0


def node_range(pool: Obj) -> tuple[int, int | None]:
    """(fewest, most) nodes a node pool holds, as the GKE API reports it (container v1
    NodePool): its autoscaling bounds (per zone or total; the most None when unset), or its
    fixed node count twice."""
    scaling = pool.get("autoscaling") or {}
    if scaling.get("enabled"):
        high = scaling.get("maxNodeCount", scaling.get("totalMaxNodeCount"))
        return (int(scaling.get("minNodeCount", scaling.get("totalMinNodeCount", 0))),
                None if high is None else int(high))
    count = int(pool.get("initialNodeCount") or 0)
    return count, count


def pool_now(pool: Obj, nodes_now: int | None, usd_per_chip_hour: float,
             capacity: str = "on-demand") -> PoolNow:
    """Pure: one node pool as the GKE API reports it (container v1 NodePool: autoscaling,
    initialNodeCount) and the nodes the Kubernetes API lists for it now, priced at the rate
    of the mode it bills in (``capacity``), which after a change of gke.capacity is not
    the profile's."""
    machine = str((pool.get("config") or {}).get("machineType", "?"))
    chips = chips_per_node(pool)
    low, high = node_range(pool)
    if (pool.get("autoscaling") or {}).get("enabled"):
        static, configured = low > 0, f"{low}..{'?' if high is None else high} nodes"
        billed = nodes_now or 0
    else:
        # GKE keeps a static pool at its count: each VM bills from its creation, whether or
        # not its Kubernetes node has registered yet (booting, NotReady, being repaired), so
        # the nodes listed now are a floor, never the bill (the teardown preview prices the
        # same pool at its count: "billed while it exists").
        static, configured = True, f"{low} nodes"
        billed = max(nodes_now or 0, low)
    return PoolNow(str(pool.get("name", "?")), machine, static, configured, nodes_now, chips,
                   billed * chips * usd_per_chip_hour, capacity)


def jobset_now(jobset: Obj) -> JobSetNow:
    meta, status = jobset["metadata"], jobset.get("status") or {}
    conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    state = ("completed" if conditions.get("Completed") == "True" else
             "failed" if conditions.get("Failed") == "True" else
             "queued" if (jobset.get("spec") or {}).get("suspend") else "running")
    return JobSetNow(meta["name"], (meta.get("labels") or {}).get(STAGE_LABEL, "?"), state,
                     meta.get("creationTimestamp", "?"))


def gather(profile: Profile, apis: Any, storage_client: Any, kube: Any | None) -> Snapshot:
    """Read-only: GET the cluster, list nodes and JobSets, list the bucket."""
    from flows.backends.gke.infra.cluster import live_capacity
    from flows.config.capacity import price_for

    gke = gke_section(profile)
    found = apis.get_cluster(gke.project, gke.region, gke.cluster)
    snap = Snapshot(cluster=None if found is None else str(found.get("status", "RUNNING")))
    nodes: list[Obj] | None = None
    if found is not None and kube is not None:
        try:
            nodes = [n.to_dict() if hasattr(n, "to_dict") else n
                     for n in kube.core.list_node().items]
            from flows.backends.gke.watch.client import JOBSET_GROUP, JOBSET_VERSION, JOBSETS

            listed = kube.custom.list_namespaced_custom_object(
                JOBSET_GROUP, JOBSET_VERSION, gke.namespace, JOBSETS)
            snap.jobsets = [jobset_now(j) for j in listed.get("items", [])
                            if STAGE_LABEL in ((j.get("metadata") or {}).get("labels") or {})]
        except Exception as exc:  # shown, never fatal: the GKE view stands
            snap.unreachable.append(f"Kubernetes API: {str(exc).splitlines()[0][:200]}")
    for pool in (found or {}).get("nodePools", []):
        name = pool.get("name")
        count = None if nodes is None else sum(
            1 for n in nodes if ((n.get("metadata") or {}).get("labels") or {})
            .get(NODE_POOL_LABEL) == name)
        if chips_per_node(pool):
            mode = live_capacity(pool)
            price, _ = price_for(gke.prices, mode)
            snap.pools.append(pool_now(pool, count, price.usd_per_chip_hour, mode))
        else:
            snap.cpu_nodes = (snap.cpu_nodes or 0) + (count or 0)
    if gke.reservation:
        _read_reservation(gke, gke.reservation, apis, snap)
    try:
        if storage_client.lookup_bucket(gke.bucket) is not None:
            blobs = list(storage_client.list_blobs(gke.bucket))
            snap.bucket_bytes = sum(int(b.size or 0) for b in blobs)
            snap.bucket_objects = len(blobs)
    except Exception as exc:  # shown, never fatal
        snap.unreachable.append(f"bucket gs://{gke.bucket}: {str(exc).splitlines()[0][:200]}")
    return snap


def _read_reservation(gke: GkeSection, reservation: str, apis: Any, snap: Snapshot) -> None:
    """The reservation's hosts: Compute Engine bills the unused ones too, while it exists
    (cloud.google.com/compute/docs/instances/reservations-delete), teardown or not; the ones
    in use are the pool's nodes, priced above."""
    from flows.config.capacity import price_for

    try:
        found = apis.get_reservation(gke.project, gke.zone, reservation)
    except Exception as exc:  # shown, never fatal
        snap.unreachable.append(f"reservation {reservation}: "
                                f"{str(exc).splitlines()[0][:200]}")
        return
    if found is None:
        return
    specific = found.get("specificReservation") or {}
    count, in_use = int(specific.get("count", 0)), int(specific.get("inUseCount", 0))
    snap.reservation_hosts = (count, in_use)
    snap.reservation_usd_per_hour = (max(count - in_use, 0) * gke.chips_per_host
                                     * price_for(gke.prices, "reservation")[0].usd_per_chip_hour)


def human_bytes(size: int) -> str:
    value, unit = float(size), "B"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            break
        value /= 1024
    return f"{value:,.1f} {unit}" if unit != "B" else f"{size} B"


def problems(profile: Profile, snap: Snapshot) -> list[str]:
    """A static TPU pool in a mode that scales from zero bills every chip while idle."""
    gke = gke_section(profile)
    if not gke.scales_from_zero:
        return []
    return [f"TPU pool {p.name} is static ({p.configured}, ${p.usd_per_hour:,.2f}/h busy or "
            f"not), but gke.capacity {', '.join(gke.capacity_chain)} should have no TPU node "
            "while nothing "
            f"trains. Fix: `tpurl teardown {profile.name}` and rerun (the infra stage deploys "
            "the autoscaled pool), or set gke.capacity: reservation if the pool is meant"
            for p in snap.pools if p.static]


def render(profile: Profile, snap: Snapshot, now: datetime | None = None) -> str:
    gke = gke_section(profile)
    now = now or datetime.now(UTC)
    lines = [f"{profile.name}: capacity {', '.join(gke.capacity_chain)} at "
             f"${gke.usd_per_chip_hour:.2f}/chip-h "
             f"({now:%Y-%m-%d %H:%M} UTC)"]
    if snap.cluster is None:
        lines.append(f"  cluster {gke.cluster} ({gke.project}/{gke.region}): none")
    else:
        lines.append(f"  cluster {gke.cluster} ({gke.project}/{gke.region}): {snap.cluster}")
        for p in snap.pools:
            kind = "static" if p.static else "autoscaled"
            now_text = "?" if p.nodes_now is None else str(p.nodes_now)
            lines.append(f"  TPU pool {p.name}: {p.machine_type}, {kind} {p.configured} "
                         f"({p.capacity}), {now_text} node(s) now, ${p.usd_per_hour:,.2f}/h")
        if snap.cpu_nodes is not None:
            lines.append(f"  CPU pools: {snap.cpu_nodes} node(s) now (not priced here)")
    if snap.reservation_hosts is not None:
        count, in_use = snap.reservation_hosts
        lines.append(f"  reservation {gke.reservation} ({gke.zone}): {count} host(s), {in_use} "
                     f"in use; the unused bill too while it exists: "
                     f"${snap.reservation_usd_per_hour:,.2f}/h")
    running = [j for j in snap.jobsets if j.state in ("queued", "running")]
    for j in running:
        lines.append(f"  JobSet {j.name} ({j.stage}): {j.state} since {j.since}")
    if snap.cluster is not None and not running:
        lines.append("  no JobSet running or queued")
    if snap.bucket_bytes is None:
        lines.append(f"  bucket gs://{gke.bucket}: none")
    else:
        lines.append(f"  bucket gs://{gke.bucket}: {human_bytes(snap.bucket_bytes)} in "
                     f"{snap.bucket_objects} object(s) (storage is billed per GB-month)")
    lines += [f"  could not read {what}" for what in snap.unreachable]
    lines.append(f"  TPU now: ${snap.usd_per_hour:,.2f} per hour"
                 + (" — you are paying for TPUs right now" if snap.usd_per_hour else ""))
    lines += [f"  PROBLEM: {text}" for text in problems(profile, snap)]
    lines += [f"  note: TPU pool {p.name} is {p.capacity}, the profile's gke.capacity is "
              f"{', '.join(gke.capacity_chain)}: the next `tpurl run {profile.name}` "
              "re-applies the blueprint and replaces it" for p in snap.pools
              if p.capacity not in gke.capacity_chain]
    return "\n".join(lines)


def read_only_clients(profile: Profile, command: str,
                      say_reason: bool = True) -> tuple[Any, Any, Any] | None:
    """The Google clients and (when a kubeconfig context answers) the Kubernetes client that
    `tpurl status` and `tpurl support-bundle` read through; None, after saying why, for a
    profile that is not GKE. ``say_reason`` False prints only the exception's type (the
    bundle keeps whatever an exception text might carry out of the terminal)."""
    from flows.backends.gke.infra import clients
    from flows.backends.gke.infra.settings import settings_from_profile
    from flows.backends.gke.watch.client import connect

    if profile.gke is None:
        print(f"error: {command} is for GKE profiles; {profile.name} uses backend "
              f"{profile.backend}", file=sys.stderr)
        return None
    apis, storage_client = clients.default_clients(settings_from_profile(profile))
    try:
        kube = connect(profile)
    except Exception as exc:  # no kubeconfig yet: the cloud view answers
        kube = None
        reason = (str(exc).splitlines()[0][:200] if say_reason and str(exc)
                  else type(exc).__name__)
        print(f"(Kubernetes API not reachable: {reason})", file=sys.stderr)
    return apis, storage_client, kube


def status_command(profile: Profile) -> int:
    """For the CLI: print the snapshot; 1 when a static TPU pool exists where none should.
    A profile with an eval section also gets its promoted pointer (any backend), and every
    profile its last measured throughput (flows/core/throughput.py)."""
    from flows.backends import backend_for
    from flows.run.result import recent_results, throughput_status_line

    print(profile.name + "\n" + throughput_status_line(
        recent_results(backend_for(profile).storage, profile)))
    if profile.gke is None and profile.eval is None:
        return 0
    if profile.eval is not None:
        from flows.runpage.promotion import promoted_lines

        print("\n".join(promoted_lines(backend_for(profile).storage, profile)))
        if profile.gke is None:
            return 0
    opened = read_only_clients(profile, "status")
    if opened is None:
        return 2
    snap = gather(profile, *opened)
    print(render(profile, snap))
    return EXIT_STATIC_POOL if problems(profile, snap) else 0
