"""Pre-flight's (mode, zone) check: every pool the profile asks for (one per capacity mode
and zone, flows/backends/gke/capacity_pools.py) must be one its zone can serve.

Why per pair and not per zone: a zone may offer the TPU machine type yet not the mode.
Dynamic Workload Scheduler (flex-start, and queued provisioning, which GKE runs as
flex-start with ``--enable-queued-provisioning``) serves TPU v6e in fewer zones than on-demand
and spot do, and a pool whose pair cannot be served either stops ``gcluster deploy`` half way
or waits its whole capacity budget for a slice that never comes.

Two sources, in this order:
- the API: which zones offer the machine type (Compute Engine machineTypes.aggregatedList,
  ``gcloud compute machine-types list --filter=name=MACHINE``; a zone that does not list it
  cannot host the pool in any mode). Asked, never hard-coded, since Google adds zones;
- Google's documentation, for what no API answers (the tables below, each with its source
  and the date it was read). The TPU quota is regional (``gcloud compute regions describe``,
  one limit for every zone of the region), so the quota of each mode is checked once per
  region by ``tpu-quota`` (preflight/capacity.py), not here.
Pure: ``check_zone_modes`` is a function of the profile and the zones the API listed.
"""

from __future__ import annotations

from flows.backends.gke.infra.preflight.results import CheckResult, FactError, result, unknown
from flows.backends.gke.infra.settings import InfraSettings

NAME = "zone-capacity"

# Dynamic Workload Scheduler's zones per TPU family, for GKE node pools (flex-start, and
# flex-start with queued provisioning). Source: GKE "About GPU and TPU provisioning with
# flex-start" (cloud.google.com/kubernetes-engine/docs/concepts/dws, "Requirements": "Flex-start
# supports the following ... zones", TPU v6e: asia-northeast1-b, us-east5-a, us-east5-b; GKE
# 1.33.0-gke.1712000 or later), read 2026-12-05. Cloud TPU's own flex-start (the queued
# resources API, cloud.google.com/tpu/docs/request-using-flex-start, "Limitations") lists
# v6e in asia-northeast1-b and us-east5-a only: that is TPU VMs, not GKE node pools.
# TPU v5p (tpu-v5p-slice) and TPU7x (tpu7x) are not listed: no page read on 2026-12-06 (GKE's
# flex-start concepts page as stored, Cloud TPU's "TPU regions and zones", which names the
# zones offering each generation in any mode, and GKE's Ironwood page) lists the zones where
# Dynamic Workload Scheduler serves them, so a flex-start or queued pool of theirs is
# reported unknown by ``check_zone_modes``, never ok.
DWS_ZONES: dict[str, tuple[str, ...]] = {
    "tpu-v6e-slice": ("asia-northeast1-b", "us-east5-a", "us-east5-b"),
}
DWS_MODES = ("flex-start", "queued")

# Zones whose TPU v6e Google documents as single-tenant (capacity set aside for particular
# customers): the machine type may be listed there while an ordinary project is never served.
# Source: Cloud TPU "TPU regions and zones" (cloud.google.com/tpu/docs/regions-zones, the
# localized table that marks them; the English table of the same page omits these zones),
# read 2026-12-05: us-east5-c, us-east4-a, us-east4-b single-tenant; us-west1-c single-tenant
# except for spot quota.
SINGLE_TENANT_ZONES: dict[str, dict[str, tuple[str, ...]]] = {
    "tpu-v6e-slice": {"us-east5-c": (), "us-east4-a": (), "us-east4-b": (),
                      "us-west1-c": ("spot",)},
}


def asked_pairs(s: InfraSettings) -> list[tuple[str, str]]:
    """(mode, zone) of every TPU pool the blueprint builds: a reservation in gke.zone only,
    every other mode in each zone of gke.zones (capacity_pools.tpu_pools' rule)."""
    g = s.gke
    return [(mode, zone) for mode in g.capacity_chain
            for zone in ((g.zone,) if mode == "reservation" else g.zone_order)]


def pair_problem(mode: str, zone: str, accelerator: str, offering: set[str]) -> str | None:
    """Why ``mode`` cannot be served in ``zone`` (None: it can, as far as is known)."""
    if zone not in offering:
        return "the zone does not offer the machine type"
    if mode in DWS_MODES:
        documented = DWS_ZONES.get(accelerator)
        if documented is not None and zone not in documented:
            return "Dynamic Workload Scheduler does not serve this TPU there"
    return None


def zones_serving(mode: str, region: str, accelerator: str, offering: set[str]) -> list[str]:
    """The zones of ``region`` that can serve ``mode``: those offering the machine type, for
    a Dynamic Workload Scheduler mode also documented for it."""
    zones = sorted(z for z in offering if z.rsplit("-", 1)[0] == region)
    return [z for z in zones if pair_problem(mode, z, accelerator, offering) is None]


def check_zone_modes(s: InfraSettings, offering: set[str] | FactError) -> CheckResult:
    """Fails on the first (mode, zone) pair no zone can serve, naming the pair, why, and the
    region's zones that can; warns on a pair in a single-tenant zone; ok otherwise."""
    g = s.gke
    machine, accelerator = g.machine_type, g.machine.accelerator_label
    listing = f"gcloud compute machine-types list --filter=name={machine} --project={g.project}"
    if isinstance(offering, FactError):
        return unknown(NAME, offering, f"check the zones yourself: {listing}")
    bad: list[str] = []
    for mode, zone in asked_pairs(s):
        why = pair_problem(mode, zone, accelerator, offering)
        if why is None:
            continue
        can = zones_serving(mode, g.region, accelerator, offering)
        where = ", ".join(can) if can else f"none in {g.region}"
        bad.append(f"({mode}, {zone}): {why} (zones of {g.region} that serve {mode}: {where})")
    if bad:
        return result(NAME, "fail", f"{machine}: " + "; ".join(bad), _fix(s, offering))
    tenant = [f"({mode}, {zone})" for mode, zone in asked_pairs(s) if mode != "reservation"
              and mode not in SINGLE_TENANT_ZONES.get(accelerator, {}).get(zone, (mode,))]
    if tenant:
        return result(NAME, "warn", f"{machine}: {', '.join(tenant)}: Google documents this "
                      f"zone's TPU {g.machine.generation} as single-tenant (capacity set aside "
                      "for particular customers); an ordinary project's pool there may never get a slice",
                      "keep the zone only if your account team confirmed capacity there; "
                      "otherwise remove it from gke.zones")
    undocumented = [f"({mode}, {zone})" for mode, zone in asked_pairs(s)
                    if mode in DWS_MODES and DWS_ZONES.get(accelerator) is None]
    if undocumented:
        return result(NAME, "unknown", f"{machine}: {', '.join(undocumented)}: Google's "
                      f"pages read list no zones where Dynamic Workload Scheduler serves TPU "
                      f"{g.machine.generation}; the zone offers the machine type, whether "
                      "flex-start or queued provisioning gets a slice there is not known",
                      "ask your account team which zones serve it, or put on-demand or spot "
                      "first in gke.capacity")
    pairs = ", ".join(f"({m}, {z})" for m, z in asked_pairs(s))
    return result(NAME, "ok", f"{machine}: every pool's zone serves its mode: {pairs}")


def _fix(s: InfraSettings, offering: set[str]) -> str:
    """Which gke.zones (or gke.capacity) serves every mode of the chain."""
    g = s.gke
    accelerator = g.machine.accelerator_label
    modes = [m for m in g.capacity_chain if m != "reservation"]
    keep = [z for z in g.zone_order
            if all(pair_problem(m, z, accelerator, offering) is None for m in modes)]
    if keep:
        return (f"set gke.zones: [{', '.join(keep)}] (the zones of the list that serve every "
                f"mode of gke.capacity), or drop the modes those zones cannot serve from "
                "gke.capacity")
    every = [z for z in zones_serving(modes[0], g.region, accelerator, offering)
             if all(pair_problem(m, z, accelerator, offering) is None for m in modes)] \
        if modes else []
    if every:
        return (f"set gke.zones to zones of {g.region} that serve every mode of "
                f"gke.capacity: [{', '.join(every)}]")
    return ("no zone of the region serves every mode of gke.capacity: drop the modes listed "
            f"from gke.capacity, or choose another gke.region (`gcloud compute machine-types "
            f"list --filter=name={g.machine_type}` lists the zones offering {g.machine_type})")
