"""Before ``gcluster deploy``: will the edited blueprint build the TPU pool the capacity mode
needs, once gcluster has expanded it?

Why check the blueprint and not only the live pool afterwards: a pool built static by mistake
bills every chip from the moment it exists (about $86/h for a v6e-32 at list price), and the
post-deploy check only sees it then. Why "as gcluster will expand it": the toolkit's example
has no ``static_node_count``, and gcluster fills one in for a TPU pool when the key is absent
and ``enable_flex_start`` is not true (cluster-toolkit pkg/config/hardware.go,
expandHardwareSettings; a key present with a null value counts as present). A static count
makes gke-node-pool drop its autoscaling block (modules/compute/gke-node-pool/main.tf,
``static_node_set``). So a blueprint that merely lacks the setting is a static pool.

Every TPU pool of the profile is checked (one per mode of gke.capacity and zone of
gke.zones, flows/backends/gke/capacity_pools.py), each against its own mode, and so are its
zone and its capacity label, which Kueue's flavor of the mode selects.

Pure: the edited text, the profile's GKE section and the deploy vars in, problems out.
"""

from __future__ import annotations

import re
from typing import Any

from ruamel.yaml import YAML

from flows.backends.gke.capacity_pools import TpuPool, pool_kubernetes_labels, tpu_pools
from flows.config.gke import GkeSection

_EDITS = "deployments/blueprints/tpu-cluster.edits.yaml"
_VAR = re.compile(r"^\$\(vars\.([A-Za-z0-9_]+)\)$")


def _resolve(value: Any, variables: dict[str, Any]) -> Any:
    if isinstance(value, str) and (m := _VAR.match(value)):
        return variables.get(m.group(1))
    if isinstance(value, dict):
        return {k: _resolve(v, variables) for k, v in value.items()}
    if isinstance(value, list):
        return [_resolve(v, variables) for v in value]
    return value


def expanded_static_count(settings: dict[str, Any], variables: dict[str, Any],
                          used: tuple[dict[str, Any], ...] = ()) -> tuple[int | None, bool]:
    """(static_node_count after gcluster's expansion, True if gcluster filled it in).
    ``used``: the settings of the modules the pool ``use``s, where gcluster also looks for
    the topology (a workload policy's accelerator_topology: hardware.go
    extractTopologyFromWorkloadPolicy)."""
    if "static_node_count" in settings:
        value = _resolve(settings["static_node_count"], variables)
        return (None if value is None else int(value)), False
    machine = str(_resolve(settings.get("machine_type"), variables) or "")
    placement = _resolve(settings.get("placement_policy") or {}, variables)
    topology = _resolve(settings.get("tpu_topology"), variables) or placement.get("tpu_topology")
    for other in used:
        policy = _resolve(other.get("workload_policy") or {}, variables)
        topology = topology or policy.get("accelerator_topology")
    is_tpu = machine.lower().startswith("ct") or "tpu" in machine.lower()
    if not topology or not is_tpu or _resolve(settings.get("enable_flex_start"),
                                              variables) is True:
        return None, False
    per_vm = re.search(r"-(\d+)t$", machine)
    chips = 1
    for side in str(topology).split("x"):
        chips *= int(side)
    return chips // (int(per_vm.group(1)) if per_vm else 4), True


def _modules(text: str) -> tuple[dict[str, dict[str, Any]], dict[str, Any],
                                  dict[str, tuple[str, ...]]]:
    """(settings by module id, the blueprint's vars, the ids each module uses)."""
    doc = YAML(typ="safe").load(text) or {}
    found, uses = {}, {}
    for group in doc.get("deployment_groups") or []:
        for module in (group or {}).get("modules") or []:
            found[str(module.get("id"))] = dict(module.get("settings") or {})
            uses[str(module.get("id"))] = tuple(str(u) for u in module.get("use") or ())
    return found, dict(doc.get("vars") or {}), uses


def pool_shape_problems(text: str, gke: GkeSection, deploy_vars: dict[str, str],
                        team: str | None = None) -> list[tuple[str, str, str]]:
    """(setting, problem, fix) for each way an expanded TPU pool of the profile (its team's,
    with ``team``) misses its mode's shape."""
    modules, bp_vars, uses = _modules(text)
    variables = {**bp_vars, **deploy_vars}
    out: list[tuple[str, str, str]] = []
    for pool in tpu_pools(gke, team):
        settings = modules.get(pool.module_id)
        if not settings:
            out.append((pool.module_id, f"the blueprint has no module {pool.module_id!r} for "
                        f"the {pool.mode} pool in {pool.zone}",
                        f"update {_EDITS} for this Cluster Toolkit version"))
            continue
        used = tuple(modules.get(u, {}) for u in uses.get(pool.module_id, ()))
        out += _one_pool(pool, settings, variables, gke, used)
    return out


def _placement_problems(pool: TpuPool, settings: dict[str, Any], variables: dict[str, Any],
                        gke: GkeSection, used: tuple[dict[str, Any], ...]
                        ) -> list[tuple[str, str, str]]:
    """How the pool gets its slice's shape: tpu_topology in its own placement_policy, or, for
    a multi-host Ironwood slice, a used HIGH_THROUGHPUT workload policy of that topology and
    no placement_policy of its own, which would win over the policy's output (GKE's Ironwood
    page; gcluster pkg/config/expand.go useModule)."""
    where = f"{pool.module_id}.placement_policy"
    own = _resolve(settings.get("placement_policy") or {}, variables)
    policies = [_resolve(u.get("workload_policy") or {}, variables) for u in used
                if u.get("workload_policy")]
    if gke.machine.generation == "tpu7x" and gke.hosts_per_slice > 1:
        fix = f"edits tpu7x-workload-policy and tpu7x-pool-uses-workload-policy ({_EDITS})"
        if not any(p.get("type") == "HIGH_THROUGHPUT"
                   and p.get("accelerator_topology") == gke.topology for p in policies):
            return [(where, f"a multi-host tpu7x pool needs a HIGH_THROUGHPUT workload policy "
                     f"of accelerator_topology {gke.topology}; the pool uses {policies or 'none'}",
                     fix)]
        if own:
            return [(where, "the pool sets placement_policy itself, which wins over its "
                     f"workload policy's (gcluster useModule): {own}", fix)]
        return []
    if own.get("tpu_topology") != gke.topology:
        return [(where, f"the pool's tpu_topology is {own.get('tpu_topology')}, the profile's "
                 f"gke.topology {gke.topology}", f"keep the example's placement_policy "
                 f"({_EDITS})")]
    return []


def _one_pool(pool: TpuPool, settings: dict[str, Any], variables: dict[str, Any],
              gke: GkeSection, used: tuple[dict[str, Any], ...] = ()
              ) -> list[tuple[str, str, str]]:
    mode, hosts = pool.mode, gke.hosts_per_slice
    static, filled = expanded_static_count(settings, variables, used)
    affinity = _resolve(settings.get("reservation_affinity")
                        or {"consume_reservation_type": "NO_RESERVATION"}, variables)
    kind = affinity.get("consume_reservation_type")
    names = [r.get("name") for r in affinity.get("specific_reservations") or []]
    spot = _resolve(settings.get("spot"), variables) is True
    flex = _resolve(settings.get("enable_flex_start"), variables) is True
    queued = _resolve(settings.get("enable_queued_provisioning"), variables) is True
    out = _placement_problems(pool, settings, variables, gke, used)
    module = pool.module_id

    def need(ok: bool, setting: str, problem: str, fix: str) -> None:
        if not ok:
            out.append((f"{module}.{setting}", problem, f"{fix} ({_EDITS})"))

    zones = _resolve(settings.get("zones"), variables)
    need(zones == [pool.zone], "zones", f"the {mode} pool {pool.name} belongs in "
         f"{pool.zone}, the blueprint gives {zones}", "one pool per zone of gke.zones")
    labels = _resolve(settings.get("kubernetes_labels"), variables) or {}
    want_labels = pool_kubernetes_labels(mode, pool.team)
    need(all(labels.get(k) == v for k, v in want_labels.items()), "kubernetes_labels",
         f"the {mode} pool needs the labels {want_labels} (Kueue's flavor of the mode selects "
         f"them), the blueprint gives {labels}", "edit capacity-pool-label")
    if not pool.autoscaled:
        need(static == hosts, "static_node_count",
             f"capacity reservation needs a static pool of {hosts} nodes per slice, the "
             f"blueprint gives {static}", f"set static_node_count to {hosts} or leave it unset")
        need(kind == "SPECIFIC_RESERVATION" and names == [gke.reservation],
             "reservation_affinity", f"capacity reservation needs SPECIFIC_RESERVATION on "
             f"{gke.reservation}, the blueprint gives {kind} {names or ''}".rstrip(),
             "keep the example's reservation_affinity")
    else:
        how = ("gcluster fills static_node_count in (hardware.go) because the blueprint "
               f"has none: a static pool of {static} nodes, billed until teardown"
               if filled else f"static_node_count is {static}: a static pool, billed until "
               "teardown")
        need(static is None, "static_node_count", f"capacity {mode} needs an autoscaled pool; "
             f"{how}", "set static_node_count: null (edit capacity-not-static)")
        low = _resolve(settings.get("autoscaling_min_node_count"), variables)
        high = _resolve(settings.get("autoscaling_max_node_count"), variables)
        span = (f"capacity {mode} needs autoscaling 0..{hosts} nodes per slice, the "
                f"blueprint gives {low}..{high}")
        need(low == 0, "autoscaling_min_node_count", span, "edit capacity-scale-from-zero")
        need(high == hosts, "autoscaling_max_node_count", span,
             "edit capacity-scale-to-one-slice")
        need(kind == "NO_RESERVATION" and not names, "reservation_affinity",
             f"capacity {mode} consumes no reservation, the blueprint gives {kind} "
             f"{names or ''}".rstrip(), "edit capacity-no-reservation")
    need(spot == (mode == "spot"), "spot", f"spot is {spot} for capacity {mode}",
         "edit capacity-spot applies to gke.capacity: spot only")
    need(flex == (mode in ("flex-start", "queued")), "enable_flex_start",
         f"enable_flex_start is {flex} for capacity {mode}",
         "edit capacity-flex-start applies to gke.capacity: flex-start and queued only")
    need(queued == (mode == "queued"), "enable_queued_provisioning",
         f"enable_queued_provisioning is {queued} for capacity {mode}",
         "edit capacity-queued applies to gke.capacity: queued only")
    if mode in ("flex-start", "queued"):
        need(_resolve(settings.get("auto_repair"), variables) is False, "auto_repair",
             f"{mode} needs node auto-repair off", "edit capacity-flex-start-no-auto-repair")
    if mode == "flex-start":
        want = int((gke.max_run_hours or 0) * 3600)
        got = _resolve(settings.get("max_run_duration"), variables)
        need(got == want, "max_run_duration", f"max_run_duration is {got}, gke.max_run_hours "
             f"asks for {want} s", "edit capacity-flex-start-max-run")
    return out
