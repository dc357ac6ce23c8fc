"""Pre-flight's capacity checks: the reservation a reservation profile consumes, and the TPU
quota each capacity mode's VMs count against (none for a reservation's). A chain of modes
(gke.capacity) is checked mode by mode: a mode without quota would spend its whole wait
budget before the next mode is tried, so it fails the check, naming the mode."""

from __future__ import annotations

from typing import Any

from flows.backends.gke.infra.cluster import pool_mismatches
from flows.backends.gke.infra.preflight.quota_names import describe_command, metric_matches, quota_ids
from flows.backends.gke.infra.preflight.results import CheckResult, FactError, result, unknown
from flows.backends.gke.infra.settings import InfraSettings


def _pool_exists(s: InfraSettings, cluster: Any) -> bool:
    return isinstance(cluster, dict) and not pool_mismatches(cluster, s)


def check_reservation(s: InfraSettings, res: dict[str, Any] | FactError | None,
                      cluster: Any = None) -> CheckResult:
    name = "reservation"
    if "reservation" not in s.gke.capacity_chain:
        return result(name, "ok", f"capacity {', '.join(s.gke.capacity_chain)} consumes no "
                      "reservation")
    listing = (f"gcloud compute reservations list --project={s.gke.project} "
               f"--filter=zone:{s.gke.zone}")
    if isinstance(res, FactError):
        return unknown(name, res, f"check it yourself: {listing}")
    if res is None:
        return result(name, "fail", f"no reservation {s.gke.reservation!r} in {s.gke.zone}",
                           f"set gke.reservation to one listed by `{listing}` (same zone as "
                           "gke.zone), or ask your account team for v6e capacity there")
    specific = res.get("specificReservation") or {}
    machine = (specific.get("instanceProperties") or {}).get("machineType", "")
    if machine and machine.rsplit("/", 1)[-1] != s.gke.machine_type:
        return result(name, "fail", f"{s.gke.reservation} reserves {machine}, not "
                           f"{s.gke.machine_type}", "use a reservation of the profile's machine "
                           "type, or change gke.machine_type/topology to match it")
    if res.get("status", "READY") != "READY":
        return result(name, "fail", f"{s.gke.reservation} is {res.get('status')}",
                           "wait until it is READY (gcloud compute reservations describe)")
    if res.get("specificReservationRequired") is not True:
        # gke-node-pool's reservation_definitions.tf keeps only specific_reservation_required
        # reservations, and main.tf's precondition stops the apply ("Its consumption type must
        # be \"specific\""); the API's JSON may leave a false out.
        return result(name, "fail", f"{s.gke.reservation} is consumed automatically by any "
                      "matching VM (specificReservationRequired is not true); Cluster "
                      "Toolkit's node pool consumes only a specific reservation and stops the "
                      "deploy", "use a reservation that only VMs naming it consume (`gcloud compute "
                      f"reservations describe {s.gke.reservation} --zone={s.gke.zone}` shows "
                      "specificReservationRequired: true; gcloud's create flag is "
                      "--require-specific-reservation, your account team makes TPU ones), or "
                      "choose gke.capacity: on-demand, spot, flex-start or queued")
    count, in_use = int(specific.get("count", 0)), int(specific.get("inUseCount", 0))
    free = count - in_use + (s.gke.hosts_needed if _pool_exists(s, cluster) else 0)
    chips = free * s.gke.chips_per_host
    if free < s.gke.hosts_needed:
        return result(name, "fail", f"{s.gke.reservation} has {free} free of {count} hosts "
                           f"({chips} chips); the pool needs {s.gke.hosts_needed} hosts "
                           f"({s.gke.total_chips} chips)", "free the reservation's hosts (another "
                           "node pool or VM uses them), or use a larger reservation")
    return result(name, "ok", f"{s.gke.reservation} in {s.gke.zone}: {free} free hosts "
                       f"({chips} chips) ≥ {s.gke.total_chips} chips needed")


def _quota_family(s: InfraSettings) -> str:
    """The generation's part of the TPU quota metric's name (flows/config/tpu.py)."""
    return s.gke.machine.facts.quota_family


def _quota_kind(mode: str) -> bool | None:
    """Which TPU quota the mode's VMs count against: True the preemptible one, False the
    on-demand one, None either (preflight/quota_names.py has the sources): spot counts
    against preemptible quota (Cloud TPU's planning page); flex-start, and queued
    provisioning with it, consumes preemptible quota, and standard quota when the project
    lacks preemptible (Compute Engine's provisioning models page)."""
    return {"spot": True, "flex-start": None, "queued": None}.get(mode, False)


def check_quota(s: InfraSettings, quotas: list[dict[str, Any]] | FactError) -> CheckResult:
    """The quota of every mode of the chain that brings VMs up itself (not a reservation's):
    the first that lacks the slice's chips fails the check; all fine, one line for each."""
    name = "tpu-quota"
    modes = [m for m in s.gke.capacity_chain if m != "reservation"]
    if not modes:  # GKE's TPU troubleshooting page, "On-demand or Spot VM
        # quota": a TPU slice node pool that uses a TPU reservation needs no TPU quota
        return result(name, "ok", f"capacity reservation: the pool's VMs use "
                      f"{s.gke.reservation}'s hosts, which need no TPU quota")
    found = [_mode_quota(s, mode, quotas, f"{mode}: " if len(modes) > 1 else "")
             for mode in modes]
    if bad := next((r for r in found if r.status != "ok"), None):
        return bad
    return result(name, "ok", "; ".join(r.issue.problem for r in found))


def _mode_quota(s: InfraSettings, mode: str, quotas: list[dict[str, Any]] | FactError,
                said: str) -> CheckResult:
    """One mode's quota; ``said`` names the mode in a chain of several."""
    name = "tpu-quota"
    family, kind = _quota_family(s), _quota_kind(mode)
    label = f"{'Preemptible ' if kind else ''}TPU {family.lower()}"
    console = (f"https://console.cloud.google.com/iam-admin/quotas?project={s.gke.project} "
               f"(filter: {label}, region {s.gke.region})")
    if isinstance(quotas, FactError):
        return unknown(name, quotas, f"check the {label} quota in {console}")
    tpu = [q for q in quotas if any(metric_matches(str(q.get("metric", "")), family, k)
                                    for k in ((kind,) if kind is not None else (True, False)))]
    if not tpu:
        return result(name, "unknown", f"{said}{_unlisted(s, kind)}", _read_it(s, kind, label,
                                                                             console))
    # A pool that scales from zero holds no chips while nothing trains: its slice needs headroom
    best = max(tpu, key=lambda q: float(q.get("limit", 0)) - float(q.get("usage", 0)))
    headroom = float(best.get("limit", 0)) - float(best.get("usage", 0))
    if headroom < s.gke.total_chips:
        return result(name, "fail", f"{said}{best['metric']} in {s.gke.region}: {headroom:g} "
                           f"chips free, {s.gke.total_chips} needed",
                           f"request a quota increase for {best['metric']} in {console}")
    return result(name, "ok", f"{said}{best['metric']}: {headroom:g} chips free")


def _unlisted(s: InfraSettings, kind: bool | None) -> str:
    """What the regional listing lacks, and what the mode counts against."""
    generation, family = s.gke.machine.generation, _quota_family(s)
    what = (f"no preemptible {family} TPU quota metric (PREEMPTIBLE_…{family}…)" if kind
            else f"no {family} TPU quota metric")
    why = ("; spot VMs count against the preemptible TPU quota, not the on-demand one"
           if kind else "; flex-start counts against the preemptible quota, or the on-demand "
           "one when the project lacks preemptible" if kind is None else "")
    return (f"{what} in {s.gke.region}'s quota listing (compute regions.get, which is reported "
            f"to carry only older TPU metrics, not TPU {generation}'s){why}")


def _read_it(s: InfraSettings, kind: bool | None, label: str, console: str) -> str:
    """How to read the quota the mode counts against: its Cloud Quotas id where one is known
    (preflight/quota_names.py), the console otherwise; and what to request."""
    ids = quota_ids(s.gke.machine.generation, kind)
    need = f"request {s.gke.total_chips} chips in {s.gke.region} if it is short"
    if not ids:
        kind_said = "preemptible" if kind else "on-demand"
        return (f"no id of TPU {s.gke.machine.generation}'s {kind_said} quota is documented "
                f"or reported: check the {label} quota in {console}; {need}")
    reads = " or ".join(f"`{describe_command(q, s.gke.project)}`"
                        f"{f' (dimension {q.dimension})' if q.dimension else ''}"
                        for q in ids)
    return f"read it from Cloud Quotas: {reads}, the value for region {s.gke.region}; {need}"
