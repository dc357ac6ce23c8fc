"""What ``gcluster deploy`` makes of a blueprint's TPU node pool module, for the fake gcluster.

Two upstream steps, both in GoogleCloudPlatform/cluster-toolkit (read at develop c765092f4):

1. Expansion (pkg/config/expand.go expandModule → pkg/config/hardware.go
   expandHardwareSettings), applied to every module: if the settings lack the key
   ``static_node_count`` (``Settings.Has``: a key present with a null value counts as present,
   pkg/config/yaml_test.go TestDictUnmarshalYAML), the machine type is a TPU (ct*/tpu*), a
   topology is found (``tpu_topology``, else ``placement_policy.tpu_topology``), and
   ``enable_flex_start`` is not true, it sets ``static_node_count`` = chips in the topology /
   chips per VM (the "-Nt" suffix of the machine type, CalculateAcceleratorNodes).
2. Terraform (modules/compute/gke-node-pool/main.tf): ``static_node_set = var.static_node_count
   != null``; a static pool gets ``node_count`` and no ``autoscaling`` block; otherwise
   ``autoscaling { min_node_count, max_node_count, location_policy = "ANY" }``. ``spot``,
   ``flex_start`` and ``reservation_affinity`` go to the node config; ``zones`` to the
   pool's node_locations; ``kubernetes_labels`` (plus ``cloud.google.com/gke-queued: "true"``
   with enable_queued_provisioning, main.tf:68-76) to the node config's labels; and
   enable_queued_provisioning to a ``queued_provisioning { enabled = true }`` block;
   ``taints`` (variables.tf: list of {key, value, effect}) to the node config's taints.

The result is written the way the GKE API (container v1 NodePool) reports the pool.

3. A re-apply over a pool that exists (``kept_labels``): gke-node-pool's
   ``lifecycle { ignore_changes = [node_config[0].labels, initial_node_count, ...] }``
   (modules/compute/gke-node-pool/main.tf:309-316 at v1.95.0 104708037, :322 at develop
   c765092f4) makes Terraform plan no change for new ``kubernetes_labels``: a pool kept (not
   replaced) keeps the labels it was created with. A pool is replaced when a field the
   google provider marks ForceNew changes (node_config.spot, flex_start,
   reservation_affinity, machine_type; placement_policy; queued_provisioning); then the new
   pool has the new labels.
"""

from __future__ import annotations

import re
from typing import Any

if __package__:  # imported by the tests as tests.fakes.cloud.gcluster_expand
    from tests.fakes.cloud import resource_policy
else:  # by the fake gcluster, which puts this folder on sys.path (bin/gcluster)
    import resource_policy

_VAR = re.compile(r"^\$\(vars\.([A-Za-z0-9_]+)\)$")


def resolve(value: Any, variables: dict[str, Any]) -> Any:
    """``$(vars.x)`` → the deployment var (bp.Eval in hardware.go's evalString)."""
    if isinstance(value, str) and (m := _VAR.match(value)):
        return variables.get(m.group(1))
    if isinstance(value, dict):
        return {k: resolve(v, variables) for k, v in value.items()}
    if isinstance(value, list):
        return [resolve(v, variables) for v in value]
    return value


def _chips_per_vm(machine_type: str) -> int:
    m = re.search(r"-(\d+)t$", machine_type)
    return int(m.group(1)) if m else 4  # defaultAcceleratorsPerVM


def expand(settings: dict[str, Any], variables: dict[str, Any],
           used_topology: str | None = None) -> dict[str, Any]:
    """expandHardwareSettings on one module's settings (vars resolved). ``used_topology``: a
    used module's workload_policy.accelerator_topology, where hardware.go looks last
    (extractTopologyFromWorkloadPolicy; tests/fakes/cloud/resource_policy.py)."""
    out = resolve(dict(settings), variables)
    if "static_node_count" in settings:
        return out
    machine = str(out.get("machine_type") or "")
    topology = out.get("tpu_topology") or (out.get("placement_policy") or {}).get(
        "tpu_topology") or used_topology
    if not topology or not (machine.lower().startswith("ct") or "tpu" in machine.lower()):
        return out
    if out.get("enable_flex_start") is True:
        return out
    chips = 1
    for side in str(topology).split("x"):
        chips *= int(side)
    out["static_node_count"] = chips // _chips_per_vm(machine)
    return out


def pool_name(settings: dict[str, Any], index: int, slices: int) -> str:
    """The GKE name of slice ``index``'s pool: the module's ``name`` alone for one slice, with
    "-<index>" for several (cluster-toolkit modules/compute/gke-node-pool/main.tf,
    google_container_node_pool.node_pool: name is var.name when max(num_node_pools,
    num_slices) == 1, else join("-", [var.name, count.index]))."""
    base = str(settings.get("name") or "gke-tpu-v6e-pool")
    return base if slices == 1 else f"{base}-{index}"


def node_pool(settings: dict[str, Any], name: str, project: str = "") -> dict[str, Any]:
    """The GKE NodePool the module creates from expanded settings. A specific reservation is
    consumed by key and full name (modules/compute/gke-node-pool/reservation_definitions.tf:
    reservation_resource_api_label, "projects/<project>/reservations/<name>", the project
    defaulting to the deployment's)."""
    affinity = settings.get("reservation_affinity") or {"consume_reservation_type":
                                                          "NO_RESERVATION"}
    specific = affinity.get("specific_reservations") or []
    config: dict[str, Any] = {
        "machineType": settings.get("machine_type"),
        "reservationAffinity": {
            "consumeReservationType": affinity.get("consume_reservation_type"),
            **({"key": "compute.googleapis.com/reservation-name",
                "values": [f"projects/{r.get('project') or project}/reservations/{r['name']}"
                           for r in specific]} if specific else {})},
    }
    if settings.get("service_account_email"):  # main.tf node_config.service_account
        config["serviceAccount"] = settings["service_account_email"]
    if settings.get("spot"):
        config["spot"] = True
    if settings.get("enable_flex_start"):
        config["flexStart"] = True
    if settings.get("max_run_duration") is not None:
        config["maxRunDuration"] = f"{settings['max_run_duration']}s"
    queued = settings.get("enable_queued_provisioning") is True
    labels = {**(settings.get("kubernetes_labels") or {}),
              **({"cloud.google.com/gke-queued": "true"} if queued else {})}
    if labels:
        config["labels"] = labels
    # main.tf node_config dynamic "taint" over var.taints ({key, value, effect}: the GKE API's
    # NO_SCHEDULE spelling, variables.tf ``taints``)
    if settings.get("taints"):
        config["taints"] = [{"key": t["key"], "value": str(t["value"]), "effect": t["effect"]}
                            for t in settings["taints"]]
    pool: dict[str, Any] = {
        "name": name, "status": "RUNNING", "config": config,
        **({"locations": list(settings["zones"])} if settings.get("zones") else {}),
        **({"queuedProvisioning": {"enabled": True}} if queued else {}),
        "management": {"autoRepair": settings.get("auto_repair", True)},
        "placementPolicy": {"type": (settings.get("placement_policy") or {}).get("type"),
                            "tpuTopology": (settings.get("placement_policy") or {}).get(
                                "tpu_topology"),
                            # main.tf placement_policy.policy_name (a used resource policy's)
                            **({"policyName": settings["placement_policy"]["name"]}
                               if (settings.get("placement_policy") or {}).get("name")
                               else {})}}
    static = settings.get("static_node_count")
    if static is not None:
        pool["initialNodeCount"] = int(static)
    else:
        low, high = (settings.get("autoscaling_min_node_count"),
                     settings.get("autoscaling_max_node_count"))
        scaling: dict[str, Any] = {"enabled": True, "locationPolicy": "ANY"}
        if low is None and high is None:  # total_* from variables.tf defaults 0 and 1000
            scaling.update(totalMinNodeCount=0, totalMaxNodeCount=1000)
        else:
            scaling.update(minNodeCount=low or 0, maxNodeCount=high or 0)
        pool["autoscaling"] = scaling
    return pool


_REPLACING_CONFIG = ("machineType", "spot", "flexStart", "reservationAffinity")


def kept_labels(old: dict[str, Any] | None, new: dict[str, Any]) -> dict[str, Any]:
    """``new`` as GKE holds it after the apply: with ``old``'s node labels when Terraform
    updates the existing pool in place (see 3. above), as planned when it replaces it."""
    if old is None:
        return new
    before, after = old.get("config") or {}, new.get("config") or {}
    replaced = any(before.get(k) != after.get(k) for k in _REPLACING_CONFIG) or any(
        old.get(k) != new.get(k) for k in ("placementPolicy", "queuedProvisioning"))
    if replaced:
        return new
    config = {k: v for k, v in after.items() if k != "labels"}
    if before.get("labels"):
        config["labels"] = dict(before["labels"])
    return {**new, "config": config}


def tpu_quota(expression: str, variables: dict[str, Any], pools: dict[str, dict[str, Any]]
              ) -> int:
    """The Kueue TPU quota the example renders: its ``config_template_vars.tpu_quota``, a
    product such as ``$(vars.num_slices * gke-tpu-v6e-pool.node_count_static *
    gke-tpu-v6e-pool.tpu_chips_per_node)``, evaluated as Terraform would: ``node_count_static``
    is coalesce(static_node_count, initial_node_count, 0) and ``tpu_chips_per_node`` the
    machine's chips per VM (gke-node-pool outputs.tf). ``pools``: expanded settings by module
    id. A term it cannot evaluate is an error, as a bad reference is to gcluster."""
    body = re.fullmatch(r"\$\((.*)\)", expression.strip())
    if not body:
        return int(expression)
    product = 1
    for term in (t.strip() for t in body.group(1).split("*")):
        if term.isdigit():
            product *= int(term)
        elif term.startswith("vars."):
            product *= int(variables[term.removeprefix("vars.")])
        elif term.endswith(".node_count_static"):
            settings = pools[term.removesuffix(".node_count_static")]
            product *= int(next((v for v in (settings.get("static_node_count"),
                                             settings.get("initial_node_count"))
                                 if v is not None), 0))
        elif term.endswith(".tpu_chips_per_node"):
            pool = pools[term.removesuffix(".tpu_chips_per_node")]
            product *= _chips_per_vm(str(pool.get("machine_type") or ""))
        else:
            raise ValueError(f"the fake cannot evaluate {term!r} in {expression!r}")
    return product


def deployed_pools(doc: dict[str, Any], variables: dict[str, Any]
                   ) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """(each gke-node-pool module's settings as gcluster hands them to Terraform, by module
    id; what gcluster or Terraform refuses first). Every resource-policy module is checked
    as its variables.tf and main.tf would, a ``use`` of a module the blueprint lacks is
    refused (expand.go validateModuleReference), and a pool takes a used policy's
    placement_policy and topology (resource_policy.py)."""
    modules = {m["id"]: m for g in doc["deployment_groups"] for m in g.get("modules") or []}
    policies = {mid: resolve(m.get("settings") or {}, variables) for mid, m in modules.items()
                if m.get("source") == resource_policy.SOURCE}
    refused = [p for mid, settings in policies.items()
               for p in resource_policy.problems(mid, settings)]
    refused += [f"{mid}.use: {u!r}: module not found" for mid, m in modules.items()
                for u in m.get("use") or [] if u not in modules]
    pools = {}
    for mid, module in modules.items():
        if module.get("source") == "modules/compute/gke-node-pool":
            used = [policies[u] for u in module.get("use") or [] if u in policies]
            pools[mid] = resource_policy.apply_use(
                expand(module.get("settings") or {}, variables,
                       resource_policy.used_topology(used)), used)
            # a used modules/project/service-account's output service_account_email (its
            # outputs.tf; the account <deployment_name>-<name>, main.tf) fills the pool's
            # input of that name unless set (expand.go useModule)
            for u in module.get("use") or []:
                used_module = modules.get(u) or {}
                name = (used_module.get("settings") or {}).get("name")
                if used_module.get("source") == SERVICE_ACCOUNT and name:
                    pools[mid].setdefault(
                        "service_account_email",
                        f"{variables.get('deployment_name')}-{name}@"
                        f"{variables.get('project_id')}.iam.gserviceaccount.com")
    return pools, refused


SERVICE_ACCOUNT = "modules/project/service-account"
