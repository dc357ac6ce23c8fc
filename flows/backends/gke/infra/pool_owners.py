"""Before ``gcluster deploy`` re-applies a cluster: would it delete or replace a TPU node pool
that belongs to another profile on the cluster (another team's, maybe training now)?

Why the question: a deploy applies one profile's blueprint to the cluster's one Terraform
state (the deployment folder, cluster.py). Terraform destroys a node pool no longer in the
configuration, and replaces one whose ForceNew fields change (the google provider's
container node pool: node_config.machine_type, spot, flex_start, reservation_affinity,
placement_policy, queued_provisioning; tests/fakes/cloud/gcluster_expand.py lists the ones
the fake applies). So team B's profile of another slice or capacity mode, deployed on team
A's cluster, took A's pool away, running JobSet and all.

Whose a pool is: the deployment record's ``pools_by_profile`` (what each profile's deploys
created), and the pools every other member of the cluster's shape plans
(infra/cluster_shape.py: the teams file's profiles on the cluster). A pool of neither
(a record from before profiles were recorded, one profile's own earlier mode) is the
deploying profile's to change, as before. The tool never deletes what it did not create:
it refuses, naming the pool, its owner and the way out, and leaves it in place.

Pure: the live cluster, the settings and the record in, problems out.
"""

from __future__ import annotations

from typing import Any

from flows.backends.gke.capacity_pools import tpu_pools
from flows.backends.gke.infra.cluster import RECORD_KEY, live_capacity, planned_slots
from flows.backends.gke.infra.settings import InfraSettings


def _is_tpu(pool: dict[str, Any]) -> bool:
    machine = str((pool.get("config") or {}).get("machineType") or "").lower()
    return machine.startswith("ct") or "tpu" in machine


def planned_union(s: InfraSettings, cluster: dict[str, Any] | None = None
                  ) -> dict[str, tuple[str, str, str]]:
    """Pure: GKE pool name → (mode, machine type, topology) of every TPU node pool the
    deploy's blueprint builds: every member's of the cluster's shape (blueprint.union_pools),
    each slice's pools per slice."""
    from flows.backends.gke.infra.blueprint import live_reservations, union_pools

    out: dict[str, tuple[str, str, str]] = {name: (pool.mode, s.gke.machine_type,
                                                   s.gke.topology)
                                            for name, pool in planned_slots(s)}
    for plan in union_pools(s.gke, s.shape, s.team, live_reservations(cluster), s.profile):
        facts = plan.slice
        machine = facts.machine_type if facts else s.gke.machine_type
        topology = facts.topology if facts else s.gke.topology
        slices = facts.num_slices if facts else s.gke.num_slices
        names = [plan.name] if slices == 1 else [f"{plan.name}-{i}" for i in range(slices)]
        for name in names:
            out.setdefault(name, (plan.mode, machine, topology))
    return out


def deploy_effect(pool: dict[str, Any], s: InfraSettings,
                  cluster: dict[str, Any] | None = None) -> str | None:
    """Pure: what the deploy of ``s`` does to a live TPU pool (of the live ``cluster``):
    None (keeps it), or why it goes (not in the blueprint: deleted; a ForceNew field
    differs: replaced)."""
    planned = planned_union(s, cluster if cluster is not None else {"nodePools": [pool]})
    name = str(pool.get("name"))
    if name not in planned:
        return "deleted: the cluster's blueprint has no such pool"
    mode, machine, wanted = planned[name]
    config = pool.get("config") or {}
    topology = (pool.get("placementPolicy") or {}).get("tpuTopology")
    if config.get("machineType") and config["machineType"] != machine:
        return f"replaced: {config['machineType']} becomes {machine}"
    if topology and topology != wanted:
        return f"replaced: topology {topology} becomes {wanted}"
    if (live := live_capacity(pool)) != mode:
        return f"replaced: capacity {live} becomes {mode}"
    return None


def own_pools_recreated(cluster: dict[str, Any] | None, s: InfraSettings,
                        record: dict[str, Any] | None) -> list[tuple[str, str]]:
    """Pure: (pool, what the deploy does) for each live TPU pool of no other profile that
    the deploy of ``s`` deletes or replaces: the deploying profile's own, or one of a name
    no profile plans any more (a team's pool named before pools were per team). Said
    before the deploy: a JobSet on it is lost with it."""
    theirs = owners(s, record)
    return [(str(p.get("name")), effect) for p in (cluster or {}).get("nodePools") or []
            if _is_tpu(p) and str(p.get("name")) not in theirs
            and (effect := deploy_effect(p, s, cluster))]


def owners(s: InfraSettings, record: dict[str, Any] | None) -> dict[str, str]:
    """Pure: pool name → the other profile it belongs to (recorded, or planned by another
    member of the cluster's shape)."""
    out: dict[str, str] = {}
    for profile, names in ((record or {}).get(RECORD_KEY) or {}).items():
        if profile != s.profile:
            out.update({str(n): str(profile) for n in names or []})
    for member in (s.shape.members if s.shape else ()):
        if member.profile == s.profile:
            continue
        for pool in tpu_pools(member.gke, member.team):
            for name in pool.slice_pools(member.gke.num_slices):
                out.setdefault(name, member.profile)
    return out


def pools_of_others_at_risk(cluster: dict[str, Any] | None, s: InfraSettings,
                            record: dict[str, Any] | None) -> list[tuple[str, str, str]]:
    """Pure: (pool, its owner, what the deploy would do) for each live TPU pool of another
    profile that the deploy of ``s`` would delete or replace."""
    theirs = owners(s, record)
    out = []
    for pool in (cluster or {}).get("nodePools") or []:
        name = str(pool.get("name"))
        if not _is_tpu(pool) or name not in theirs:
            continue
        if effect := deploy_effect(pool, s, cluster):
            out.append((name, theirs[name], effect))
    return out

