"""Cluster Toolkit's modules/compute/resource-policy and gcluster's ``use`` of it by a node
pool, for the fake gcluster.

Sources, GoogleCloudPlatform/cluster-toolkit at 1047080 (the newest version stored here):
- modules/compute/resource-policy/variables.tf: inputs ``project_id``, ``region``, ``name``
  (required; ``name`` must match ``^[a-z]([-a-z0-9]{0,52}[a-z0-9])?$``),
  ``group_placement_max_distance`` (default 0) and ``workload_policy``, an object of optional
  ``type``, ``max_topology_distance``, ``accelerator_topology``, ``accelerator_topology_mode``.
- main.tf: the policy's name is ``<name>-<random hex>``; its precondition: "Both
  workload_policy.type and workload_policy.accelerator_topology must be set when
  accelerator_topology_mode is specified."
- outputs.tf: ``placement_policy`` = {type COMPACT, name, tpu_topology accelerator_topology}
  when a workload policy type (or a group placement distance) is set, else nulls;
  ``accelerator_topology_mode``.
- pkg/config/validate.go: a setting no input of the module declares fails the blueprint with
  UnknownModuleSetting, "a setting was added that is not found in the module" (errors.go).
- pkg/config/expand.go validateModuleReference: a ``use`` of a module id the blueprint does
  not have fails (UnknownModuleError); useModule: each output of the used module sets the
  input of the same name unless the module set it itself ("set explicitly, skip").
- pkg/config/hardware.go extractTopologyFromWorkloadPolicy: the slice's topology for the
  static node count may come from a used module's ``workload_policy.accelerator_topology``.
"""

from __future__ import annotations

import re
from typing import Any

SOURCE = "modules/compute/resource-policy"
INPUTS = {"project_id", "region", "name", "group_placement_max_distance", "workload_policy"}
REQUIRED = ("project_id", "region", "name")
WORKLOAD_POLICY_FIELDS = {"type", "max_topology_distance", "accelerator_topology",
                          "accelerator_topology_mode"}
_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,52}[a-z0-9])?$")
SUFFIX = "0a1b2c3d"  # the random_id's hex, fixed for the tests


def problems(module_id: str, settings: dict[str, Any]) -> list[str]:
    """What gcluster or Terraform refuses in a resource-policy module's (resolved) settings."""
    out = [f"{module_id}.{key}: a setting was added that is not found in the module"
           for key in settings if key not in INPUTS]
    out += [f"{module_id}.{key}: the module's input {key} is required" for key in REQUIRED
            if settings.get(key) in (None, "")]
    name = settings.get("name")
    if isinstance(name, str) and not _NAME.match(name):
        out.append(f"{module_id}.name: The resource policy name must be between 1 and 54 "
                   "characters, start with a lowercase letter, end with an alphanumeric, and "
                   "contain only lowercase letters, numbers, and hyphens.")
    policy = settings.get("workload_policy") or {}
    if not isinstance(policy, dict):
        return [*out, f"{module_id}.workload_policy: an object is required"]
    out += [f"{module_id}.workload_policy.{key}: attribute not in the object type"
            for key in policy if key not in WORKLOAD_POLICY_FIELDS]
    if policy.get("accelerator_topology_mode") is not None and (
            policy.get("type") is None or policy.get("accelerator_topology") is None):
        out.append("Both workload_policy.type and workload_policy.accelerator_topology must be "
                   "set when accelerator_topology_mode is specified.")
    return out


def placement_policy(settings: dict[str, Any]) -> dict[str, Any]:
    """outputs.tf ``placement_policy`` of the module's resolved settings."""
    policy = settings.get("workload_policy") or {}
    placed = int(settings.get("group_placement_max_distance") or 0) > 0 or \
        policy.get("type") is not None
    return {"type": "COMPACT" if placed else None,
            "name": f"{settings['name']}-{SUFFIX}" if placed else None,
            "tpu_topology": policy.get("accelerator_topology")
            if policy.get("type") is not None else None}


def apply_use(pool: dict[str, Any], used: list[dict[str, Any]]) -> dict[str, Any]:
    """The pool's settings after gcluster's useModule with each used resource-policy: its
    placement_policy output where the pool sets none itself."""
    out = dict(pool)
    for settings in used:
        if "placement_policy" not in out:
            out["placement_policy"] = placement_policy(settings)
    return out


def used_topology(used: list[dict[str, Any]]) -> str | None:
    """hardware.go extractTopologyFromWorkloadPolicy: the first used module's
    workload_policy.accelerator_topology."""
    for settings in used:
        topology = (settings.get("workload_policy") or {}).get("accelerator_topology")
        if topology:
            return str(topology)
    return None
