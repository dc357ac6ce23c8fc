"""The Terraform preconditions of Cluster Toolkit's gke-node-pool module that concern capacity,
with their messages, applied to a blueprint module's settings.

Source: GoogleCloudPlatform/cluster-toolkit modules/compute/gke-node-pool/main.tf
(``lifecycle { precondition { ... } }`` on google_container_node_pool.node_pool) and
variables.tf (defaults: spot false, enable_flex_start false, auto_repair true,
reservation_affinity NO_RESERVATION, static_node_count null, autoscaling_total_min_nodes 0
and _max_nodes 1000, whose validations exclude the per-zone counts), read at develop
c765092f4, the newest stored version (the project pins v1.103.0). ``terraform apply`` stops with
the error_message of the first failing precondition; so does this.
"""

from __future__ import annotations

from typing import Any


def _affinity(settings: dict[str, Any]) -> tuple[str, int]:
    affinity = settings.get("reservation_affinity") or {"consume_reservation_type":
                                                          "NO_RESERVATION"}
    return (affinity.get("consume_reservation_type", "NO_RESERVATION"),
            len(affinity.get("specific_reservations") or []))


def precondition_failures(settings: dict[str, Any]) -> list[str]:
    """Each failing precondition's error_message, in main.tf's order."""
    kind, specific = _affinity(settings)
    spot = bool(settings.get("spot", False))
    flex = bool(settings.get("enable_flex_start", False))
    queued = bool(settings.get("enable_queued_provisioning", False))
    is_tpu = str(settings.get("machine_type") or "").lower().startswith(("ct", "tpu"))
    auto_repair = bool(settings.get("auto_repair", True))
    static = settings.get("static_node_count")
    total_min = settings.get("autoscaling_total_min_nodes", 0)
    total_max = settings.get("autoscaling_total_max_nodes", 1000)
    placement = settings.get("placement_policy") or {}
    zones = settings.get("zones")
    out = []
    # variables.tf validations (checked before any precondition)
    if settings.get("autoscaling_min_node_count") is not None and total_min != 0:
        out.append("autoscaling_total_min_nodes (global) is mutually exclusive with "
                   "autoscaling_min_node_count (zonal). Please unset one of them.")
    if settings.get("autoscaling_max_node_count") is not None and total_max != 1000:
        out.append("autoscaling_total_max_nodes (global) is mutually exclusive with "
                   "autoscaling_max_node_count (zonal). Please unset one of them.")
    if static is not None and (total_min != 0 or total_max != 1000):
        out.append("static_node_count cannot be set with either autoscaling_total_min_nodes "
                   "or autoscaling_total_max_nodes.")
    if not ((kind != "SPECIFIC_RESERVATION" and specific == 0)
            or (kind == "SPECIFIC_RESERVATION" and specific == 1)):
        out.append("When using NO_RESERVATION or ANY_RESERVATION as the "
                   "`consume_reservation_type`, `specific_reservations` cannot be set.")
    if placement.get("type") == "COMPACT" and not (isinstance(zones, list) and len(zones) == 1):
        out.append("Compact placement is only available for node pools operating in a single "
                   "zone.")
    # main.tf:403-414 (develop c765092f4): queued provisioning's own preconditions
    if queued and placement.get("type") == "COMPACT" and not is_tpu:
        out.append("placement_policy cannot be COMPACT when enable_queued_provisioning is "
                   "true, unless using TPUs.")
    if queued and kind != "NO_RESERVATION":
        out.append("reservation_affinity should be NO_RESERVATION when "
                   "enable_queued_provisioning is true.")
    if queued and total_min != 0:
        out.append("autoscaling_total_min_nodes should be 0 when enable_queued_provisioning "
                   "is true.")
    if flex and auto_repair:
        out.append("enable_flex_start needs node auto_repair set to false.")
    if flex and static is not None:
        out.append("enable_flex_start does not work with static_node_count. static_node_count "
                   "should be set to null.")
    if flex and kind != "NO_RESERVATION":
        out.append("enable_flex_start requires reservation_affinity.consume_reservation_type "
                   "to be 'NO_RESERVATION'.")
    if flex and spot:
        out.append("Both enable_flex_start and spot consumption option cannot be set to true "
                   "at the same time.")
    if queued and spot:  # main.tf:443-446
        out.append("Both enable_queued_provisioning and spot consumption option cannot be set "
                   "to true at the same time.")
    if spot and kind != "NO_RESERVATION":
        out.append("Spot consumption option only works with reservation_affinity "
                   "consume_reservation_type NO_RESERVATION.")
    return out
