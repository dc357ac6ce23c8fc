"""``gke.zone`` and ``gke.zones``: which zones of the region a run may be served in, in
order of preference. Pure rules, applied by ``GkeCluster`` (flows/config/gke.py).

``gke.zones`` lists the region's zones whose TPU pools may serve a run (one pool per
capacity mode and zone, flows/backends/gke/capacity_pools.py); ``gke.zone`` stays valid
alone, as one zone. With both, ``gke.zone`` must be the first of ``gke.zones``: it is the
zone tried first, the reservation's and the example's one pool's, so two different answers
would leave one of them silently unused. With ``gke.zones`` alone, ``gke.zone`` is its
first entry. Whether a zone offers TPU v6e is pre-flight's to ask; here the name and the
region are checked, as for ``gke.zone``.
"""

from __future__ import annotations

from flows.config import gcp_names as names
from flows.config.capacity import split_listed
from flows.config.errors import FixableValueError


def zone_fix(region: str, field: str = "gke.zone") -> str:
    """A zone of ``region`` named as a setting; the -b zone is one of most regions', and
    gcloud lists the region's own."""
    return (f"set {field}={region}-b or another zone of {region} (`gcloud compute zones "
            f"list --filter=region:{region}` lists them)")


def zones_from_text(data: dict[str, object]) -> dict[str, object]:
    """``gke.zones`` as text is a comma list; with zones given, a missing gke.zone is the
    first of them."""
    if "zones" not in data:
        return data
    zones = split_listed(data["zones"])
    if isinstance(zones, str) and zones.strip():
        zones = [zones.strip()]
    data = {**data, "zones": zones}
    if isinstance(zones, list) and zones and isinstance(zones[0], str) \
            and not str(data.get("zone") or "").strip():
        data["zone"] = zones[0]
    return data


def zone_problems(zone: str, zones: list[str] | None, region: str) -> list[FixableValueError]:
    """Every problem of gke.zone and gke.zones together, each naming its field and fix."""
    if problem := names.zone_problem(zone, region):
        return [FixableValueError(problem, zone_fix(region), field="zone")]
    if zones is None:
        return []
    out: list[FixableValueError] = []
    if not zones:
        out.append(FixableValueError(
            "gke.zones is empty", "list at least one zone, e.g. gke.zones: [us-east5-b, "
            "us-east5-a], or remove gke.zones to use gke.zone alone", field="zones"))
    for one in zones:
        if problem := names.zone_problem(one, region):
            out.append(FixableValueError(f"gke.zones: {problem}", f"list only zones of "
                                         f"{region} in gke.zones (e.g. {region}-b)",
                                         field="zones"))
    if repeated := sorted({z for z in zones if zones.count(z) > 1}):
        out.append(FixableValueError(f"gke.zones lists {', '.join(repeated)} more than once",
                                     "list each zone once in gke.zones", field="zones"))
    if zones and zone != zones[0]:
        out.append(FixableValueError(
            f"gke.zone is {zone!r} but gke.zones starts with {zones[0]!r}: gke.zone is the "
            "first zone tried (and the reservation's)",
            f"remove gke.zone (it is then {zones[0]}), or put {zone} first in gke.zones",
            field="zone"))
    return out
