"""The cluster: is it already what the profile asks for? If not, ``gcluster deploy`` it.

Why read the GKE API first: a deploy with ``-w`` re-plans every Terraform group (minutes) and
may touch a running cluster; when the TPU pool already matches the profile there is nothing
to do, so a second run deploys nothing. When it does not match, the deployment folder (the
Terraform state) is restored from the bucket so the *same* deployment is re-applied, never a
second one beside it.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from flows.backends.gke.capacity_pools import CAPACITY_LABEL, TpuPool, pool_kubernetes_labels
from flows.backends.gke.capacity_pools import tpu_pools as planned_pools
from flows.backends.gke.infra import bucket as gcs
from flows.backends.gke.infra.settings import BLUEPRINT_FILE, InfraSettings
from flows.config.capacity import price_for
from flows.core.backend import StageLogger
from flows.core.failures import infrastructure, user_error

# gcluster/Terraform failures that a retry cannot fix.
_USER_ERRORS = re.compile(r"(QUOTA_EXCEEDED|[Qq]uota .*exceeded|PERMISSION_DENIED|"
                          r"does not have .*permission|Error 403|invalid value|"
                          r"[Rr]eservation .*not found|use --force)")


RECORD_KEY = "pools_by_profile"
"""deployment.json: the TPU pools each profile's deploys made (infra/pool_owners.py reads it)."""


def tpu_pools(cluster: dict[str, Any], s: InfraSettings) -> list[dict[str, Any]]:
    """The live TPU pools that stand for the profile's: of its machine type, and none another
    member of the cluster plans for itself (another team's own pools: decision 0036)."""
    others = others_pools(s)
    return [p for p in cluster.get("nodePools", [])
            if (p.get("config") or {}).get("machineType") == s.gke.machine_type
            and p.get("name") not in others]


def others_pools(s: InfraSettings) -> set[str]:
    """Pure: the GKE pool names other members of the cluster's shape plan and the profile
    does not."""
    own = {name for name, _ in planned_slots(s)}
    return {name for m in (s.shape.members if s.shape else ()) if m.profile != s.profile
            for pool in planned_pools(m.gke, m.team)
            for name in pool.slice_pools(m.gke.num_slices)} - own


def planned_slots(s: InfraSettings) -> list[tuple[str, TpuPool]]:
    """(GKE pool name, the planned pool) for every TPU node pool the profile's blueprint
    builds: num_slices per (mode, zone) pool (capacity_pools.py)."""
    return [(name, pool) for pool in planned_pools(s.gke, s.team)
            for name in pool.slice_pools(s.gke.num_slices)]


def matched_pools(cluster: dict[str, Any], s: InfraSettings
                  ) -> list[tuple[dict[str, Any], TpuPool | None]]:
    """Each live TPU pool with the planned pool it stands for: by GKE name first, then, in
    order, the live pools left to the planned ones left (a cluster of one pool is compared as
    it always was, whatever its pool is called); None: a pool the profile does not plan."""
    slots = planned_slots(s)
    live = tpu_pools(cluster, s)
    by_name = {name: pool for name, pool in slots}
    taken = {p.get("name") for p in live if p.get("name") in by_name}
    spare = [pool for name, pool in slots if name not in taken]
    out: list[tuple[dict[str, Any], TpuPool | None]] = []
    for pool in live:
        if pool.get("name") in by_name:
            out.append((pool, by_name[pool["name"]]))
        else:
            out.append((pool, spare.pop(0) if spare else None))
    return out


def pool_mismatches(cluster: dict[str, Any], s: InfraSettings) -> list[str]:
    """Pure: why the cluster's TPU node pools differ from the profile ([] = they match)."""
    out = []
    if cluster.get("status", "RUNNING") != "RUNNING":
        out.append(f"cluster {s.gke.cluster} is {cluster.get('status')}")
    wanted = len(planned_slots(s))
    pools = matched_pools(cluster, s)
    if len(pools) != wanted:
        out.append(f"{len(pools)} {s.gke.machine_type} node pool(s), profile wants {wanted}")
    for pool, planned in pools:
        name = pool.get("name", "?")
        if planned is None:
            out.append(f"pool {name} is none of the profile's TPU pools")
            continue
        topology = (pool.get("placementPolicy") or {}).get("tpuTopology")
        if topology != s.gke.topology:
            out.append(f"pool {name} has topology {topology}, profile wants {s.gke.topology}")
        out += _capacity_mismatches(pool, s, planned)
        if pool.get("status", "RUNNING") != "RUNNING":
            out.append(f"pool {name} is {pool.get('status')}")
    return out


def _reservation_affinity(config: dict[str, Any]) -> tuple[str, list[str]]:
    """(consumeReservationType, reservation names) of a live pool's node config; the values
    are "projects/P/reservations/NAME" as gke-node-pool writes them
    (modules/compute/gke-node-pool/reservation_definitions.tf)."""
    affinity = config.get("reservationAffinity") or {}
    values = [v.rsplit("/", 1)[-1] for v in affinity.get("values", [])]
    kind = affinity.get("consumeReservationType") or (
        "SPECIFIC_RESERVATION" if values else "NO_RESERVATION")
    return str(kind), values


def live_capacity(pool: dict[str, Any]) -> str:
    """The capacity mode a live TPU pool bills in, from its node config: queued when
    queued provisioning is on (container v1 NodePool.queuedProvisioning), flex-start or spot
    when the node config says so, reservation when it consumes one, else on-demand."""
    config = pool.get("config") or {}
    if (pool.get("queuedProvisioning") or {}).get("enabled"):
        return "queued"
    if config.get("flexStart"):
        return "flex-start"
    if config.get("spot"):
        return "spot"
    return "on-demand" if _reservation_affinity(config)[0] == "NO_RESERVATION" else "reservation"


def _capacity_mismatches(pool: dict[str, Any], s: InfraSettings, planned: TpuPool
                         ) -> list[str]:
    """Does a live TPU pool match the planned pool of its mode and zone? Fields of the GKE
    NodePool resource (container v1: config.reservationAffinity, config.spot,
    config.flexStart, queuedProvisioning, config.labels, locations, autoscaling). Both ways:
    a pool left by another mode must not pass for this one (an autoscaled spot pool is no
    reservation, and its slice may be preempted; a static pool bills idle). A pool without
    the mode's label (one deployed before the label existed) is re-applied: Kueue's flavor
    of the mode selects it by that label."""
    name, hosts, gke, mode = pool.get("name", "?"), s.gke.hosts_per_slice, s.gke, planned.mode
    config = pool.get("config") or {}
    kind, values = _reservation_affinity(config)
    scaling = pool.get("autoscaling") or {}
    out = []
    labels = config.get("labels") or {}
    want = pool_kubernetes_labels(mode)
    if planned.team and name != planned.name:  # a team's pool is its own, by its name
        out.append(f"pool {name} is to be the team's own pool {planned.name} (decision "
                   "0036): the deploy deletes it and creates that one")
    if any(labels.get(k) != v for k, v in want.items()):
        out.append(f"pool {name} has label {CAPACITY_LABEL}={labels.get(CAPACITY_LABEL)}, "
                   f"profile's {mode} pool wants {want[CAPACITY_LABEL]}")
    if pool.get("locations") and list(pool["locations"]) != [planned.zone]:
        out.append(f"pool {name} is in {', '.join(pool['locations'])}, profile's {mode} pool "
                   f"is in {planned.zone}")
    queued = bool((pool.get("queuedProvisioning") or {}).get("enabled"))
    if queued != (mode == "queued"):
        out.append(f"pool {name} has queuedProvisioning={queued}, profile's capacity is "
                   f"{mode}")
    if not planned.autoscaled:
        if scaling.get("enabled"):
            out.append(f"pool {name} autoscales, profile's capacity reservation wants a static "
                       f"pool of {hosts} nodes")
        nodes = pool.get("initialNodeCount")
        if nodes is not None and int(nodes) != hosts:
            out.append(f"pool {name} has {nodes} nodes, profile wants {hosts}")
        if kind != "SPECIFIC_RESERVATION" or gke.reservation not in values:
            held = ", ".join(values) if values else f"none ({kind})"
            out.append(f"pool {name} consumes reservation {held}, profile wants "
                       f"{gke.reservation}")
    else:
        if values or kind != "NO_RESERVATION":
            out.append(f"pool {name} consumes a reservation, profile's capacity {mode} "
                       "takes none")
        if not scaling.get("enabled") or int(scaling.get("minNodeCount", 0)) != 0:
            out.append(f"pool {name} does not scale from zero, profile's capacity "
                       f"{mode} needs it")
    if bool(config.get("spot")) != (mode == "spot"):
        out.append(f"pool {name} has spot={bool(config.get('spot'))}, profile's capacity is "
                   f"{mode}")
    if bool(config.get("flexStart")) != (mode in ("flex-start", "queued")):
        out.append(f"pool {name} has flexStart={bool(config.get('flexStart'))}, profile's "
                   f"capacity is {mode}")
    elif mode == "flex-start" and gke.max_run_hours is not None:
        out += _lifetime_mismatch(name, config, gke.max_run_hours)
    return out


def _lifetime_mismatch(name: str, config: dict[str, Any], max_run_hours: float) -> list[str]:
    """A flex-start pool's node lifetime against gke.max_run_hours. Why: a pool kept from a
    deploy with a shorter lifetime would end every training attempt early while the plan
    promised the profile's hours. gke-node-pool writes max_run_duration as "<seconds>s"
    (cluster-toolkit modules/compute/gke-node-pool/main.tf, node_config), which GKE returns as
    config.maxRunDuration (container v1 NodeConfig, a Duration)."""
    want = int(max_run_hours * 3600)
    raw = str(config.get("maxRunDuration") or "")
    try:
        got: float | None = float(raw.removesuffix("s")) if raw else None
    except ValueError:
        got = None
    if got is not None and int(got) == want:
        return []
    held = f"{got / 3600:g} h" if got is not None else f"{raw or 'no'} maximum run duration"
    return [f"pool {name} lets its nodes live {held}, profile's gke.max_run_hours is "
            f"{max_run_hours:g} h ({want} s)"]


def unlabelled_pools(cluster: dict[str, Any], s: InfraSettings) -> list[tuple[str, str]]:
    """Pure: (why, the command that fixes it) for each live TPU pool that bills in its planned
    mode and zone but lacks that mode's ``tpurl/capacity`` label, e.g. one created before
    the label existed. Why a re-apply cannot fix it: gke-node-pool ignores changes to the
    node labels (modules/compute/gke-node-pool/main.tf ``lifecycle { ignore_changes =
    [node_config[0].labels, ...] }``, cluster-toolkit v1.95.0 main.tf:309-316), so Terraform
    keeps the pool as it is, and Kueue's flavor of the mode, which selects by the label,
    never places a pod there. A pool of another mode, topology or zone is replaced by the
    re-apply (its ForceNew fields change) and gets the label then. GKE updates a pool's
    Kubernetes labels in place (``gcloud container node-pools update --node-labels``, which
    replaces the pool's user labels: the command keeps the others)."""
    out = []
    for pool, planned in matched_pools(cluster, s):
        if planned is None or (planned.team and pool.get("name") != planned.name):
            continue  # a team's pool of another name is re-created with its labels
        config = pool.get("config") or {}
        labels = dict(config.get("labels") or {})
        want = pool_kubernetes_labels(planned.mode)
        if all(labels.get(k) == v for k, v in want.items()):
            continue
        same_place = ((pool.get("placementPolicy") or {}).get("tpuTopology") == s.gke.topology
                      and list(pool.get("locations") or [planned.zone]) == [planned.zone])
        if live_capacity(pool) != planned.mode or not same_place:
            continue
        name = pool.get("name", "?")
        wanted = ",".join(f"{k}={v}" for k, v in sorted({**labels, **want}.items()))
        out.append((f"pool {name} ({planned.mode} in {planned.zone}) has "
                    f"{CAPACITY_LABEL}={labels.get(CAPACITY_LABEL)}, not "
                    f"{want[CAPACITY_LABEL]}: re-applying the blueprint would not change it "
                    "(Cluster Toolkit's node-pool module ignores label changes), and Kueue "
                    f"places no {planned.mode} pod on it without the label",
                    f"gcloud container node-pools update {name} --cluster={s.gke.cluster} "
                    f"--location={s.gke.region} --project={s.gke.project} "
                    f"--node-labels={wanted}"))
    return out


def wrong_pools(cluster: dict[str, Any], s: InfraSettings) -> list[tuple[str, str]]:
    """Pure: (what it bills per hour now, the command that removes it) for each TPU pool whose
    shape misses the profile. Why the figure: a static pool bills every chip from
    the moment it exists, idle or not, and the person reading this decides whether to wait."""
    out = []
    for pool, planned in matched_pools(cluster, s):
        problems = ["not planned"] if planned is None else _capacity_mismatches(pool, s, planned)
        topology = (pool.get("placementPolicy") or {}).get("tpuTopology")
        if not problems and topology == s.gke.topology:
            continue
        scaling = pool.get("autoscaling") or {}
        nodes = int(scaling.get("minNodeCount", 0) if scaling.get("enabled")
                    else pool.get("initialNodeCount") or 0)
        price, whose = price_for(s.gke.prices, live_capacity(pool))
        chips = nodes * s.gke.chips_per_host
        name = pool.get("name", "?")
        out.append((f"pool {name} bills {nodes} nodes x {s.gke.chips_per_host} chips = "
                    f"{chips} chips at ${price.usd_per_chip_hour:.2f}/chip-h = "
                    f"${chips * price.usd_per_chip_hour:.2f}/h ({whose}), idle or not",
                    f"gcloud container node-pools delete {name} --cluster={s.gke.cluster} "
                    f"--location={s.gke.region} --project={s.gke.project} --quiet"))
    return out


def restore_deployment(client: Any, s: InfraSettings) -> bool:
    """Make the deployment folder present locally; True if one exists (here or in the bucket)."""
    if (s.deployment_dir / ".ghpc").is_dir() or any(s.deployment_dir.glob("*")):
        return True
    return gcs.download_folder(client, s.gke.bucket, s.state_prefix + "deployment/",
                               s.deployment_dir) > 0


def save_deployment(client: Any, s: InfraSettings, meta: dict[str, Any]) -> None:
    if s.deployment_dir.is_dir():
        gcs.upload_folder(client, s.gke.bucket, s.deployment_dir, s.state_prefix + "deployment/")
    old = gcs.read_json(client, s.gke.bucket, s.state_prefix + "deployment.json") or {}
    gcs.write_json(client, s.gke.bucket, s.state_prefix + "deployment.json", {**old, **meta})


def classify_deploy_failure(s: InfraSettings, tail_text: str, log: Path | None) -> Exception:
    where = f"gs://{s.gke.bucket}/{s.state_prefix}deployment/"
    detail = f"{tail_text}\n    full log: {log}" if log else tail_text
    if _USER_ERRORS.search(tail_text):
        return user_error("infra", "gcluster deploy failed on a cause a retry cannot fix", detail,
                          "fix the cause in the log tail (quota, permission, reservation), "
                          f"then rerun; the Terraform state is kept in {where}")
    return infrastructure("infra", "gcluster deploy stopped part-way", detail,
                     f"retried automatically; the Terraform state is kept in {where}, so the "
                     "next attempt continues the same deployment")


def deploy(s: InfraSettings, gcluster: Path, client: Any, example: Path,
           bundle_sha256: str, logger: StageLogger,
           current: dict[str, Any] | None = None) -> None:
    """Write the edited blueprint, run ``gcluster deploy`` and keep the folder in the bucket.
    ``current``: the live cluster, whose pools' reservations another team's pools keep."""
    from flows.backends.gke.infra.blueprint import edit_context, live_reservations, write_edited
    from flows.backends.gke.infra.commands import deploy_argv, render, run

    s.workdir.mkdir(parents=True, exist_ok=True)
    restored = restore_deployment(client, s)
    edited = write_edited(example, s.workdir / BLUEPRINT_FILE, edit_context(s.gke, s.shape, s.team,
                                                                  live_reservations(current),
                                                                  s.profile))
    refuse_wrong_pool_shape(s, edited.read_text())
    argv = deploy_argv(s, str(gcluster))
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    log = s.workdir / "logs" / f"deploy-{stamp}.log"
    logger.info("%s deployment %s: %s", "re-applying" if restored else "creating", s.gke.cluster,
                render(argv))
    result = None
    try:
        result = run(argv, cwd=s.workdir, log=log)
    finally:  # keep the state even (above all) when the deploy failed half-way
        meta: dict[str, Any] = {"cluster_toolkit_version": s.gke.cluster_toolkit_version,
                                "bundle_sha256": bundle_sha256, "last_apply": stamp,
                                "last_apply_ok": bool(result and result.ok)}
        if result and result.ok:
            meta["deployed_at"] = _first_deploy(client, s)
            # what the pools bill as, for the teardown: the chain's first mode as before (a
            # profile of one mode keeps its record), and every pool this deploy created
            meta["capacity"] = s.gke.capacity_chain[0]
            meta["capacity_chain"] = list(s.gke.capacity_chain)
            meta["tpu_pools"] = [name for name, _ in planned_slots(s)]
            old = gcs.read_json(client, s.gke.bucket, s.state_prefix + "deployment.json") or {}
            meta[RECORD_KEY] = {**(old.get(RECORD_KEY) or {}),
                                s.profile or "(unnamed)": meta["tpu_pools"]}
        save_deployment(client, s, meta)
    if not result.ok:
        raise classify_deploy_failure(s, result.tail_text(), log)


def refuse_wrong_pool_shape(s: InfraSettings, edited_text: str) -> None:
    """Stop before ``gcluster deploy`` when the expanded blueprint misses the mode's pool."""
    from flows.backends.gke.infra.commands import blueprint_vars
    from flows.backends.gke.infra.pool_shape import pool_shape_problems

    problems = pool_shape_problems(edited_text, s.gke, blueprint_vars(s), s.team)
    if problems:
        raise user_error("infra",
            "the edited blueprint would not build the TPU pools gke.capacity "
            f"{', '.join(s.gke.capacity_chain)} needs; nothing was deployed",
            "; ".join(f"{setting}: {problem}" for setting, problem, _ in problems),
            "; ".join(f"{setting}: {fix}" for setting, _, fix in problems))


def _first_deploy(client: Any, s: InfraSettings) -> str:
    """When the pool of this capacity mode was first deployed: a re-apply keeps the time, a
    deploy that changed the mode (a new pool: reservation affinity and spot are replaced,
    not updated) starts it again."""
    old = gcs.read_json(client, s.gke.bucket, s.state_prefix + "deployment.json") or {}
    chain = list(s.gke.capacity_chain)
    if old.get("capacity_chain", [old.get("capacity", chain[0])]) != chain:
        return datetime.now(UTC).isoformat()
    return old.get("deployed_at") or datetime.now(UTC).isoformat()


def has_kube_context(s: InfraSettings, kubeconfig: Path) -> bool:
    return kubeconfig.is_file() and f"name: {s.gke.kube_context}" in kubeconfig.read_text()
