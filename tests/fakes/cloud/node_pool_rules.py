"""The Terraform preconditions of Cluster Toolkit's gke-node-pool module that concern capacity,
with their messages, applied to a blueprint module's settings.

Source: GoogleCloudPlatform/cluster-toolkit modules/compute/gke-node-pool/main.tf
(``lifecycle { precondition { ... } }`` on google_container_node_pool.node_pool) and
variables.tf (defaults: spot false, enable_flex_start false, auto_repair true,
reservation_affinity NO_RESERVATION, static_node_count null). ``terraform apply`` stops with
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
    auto_repair = bool(settings.get("auto_repair", True))
    static = settings.get("static_node_count")
    out = []
    if not ((kind != "SPECIFIC_RESERVATION" and specific == 0)
            or (kind == "SPECIFIC_RESERVATION" and specific == 1)):
        out.append("When using NO_RESERVATION or ANY_RESERVATION as the "
                   "`consume_reservation_type`, `specific_reservations` cannot be set.")
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
    if spot and kind != "NO_RESERVATION":
        out.append("Spot consumption option only works with reservation_affinity "
                   "consume_reservation_type NO_RESERVATION.")
    return out
