"""How a TPU pool of one capacity mode in one zone is named and labelled, and how a JobSet
asks for a mode: the one table the blueprint edits, Kueue's ResourceFlavors, the JobSet
renderer and the fake cluster all read, so they cannot disagree.

Why a label of our own (``tpurl/capacity``) on every TPU pool: GKE labels spot nodes
(``cloud.google.com/gke-spot``), flex-start nodes (``cloud.google.com/gke-flex-start``), and
Cluster Toolkit labels queued-provisioning nodes (``cloud.google.com/gke-queued``,
modules/compute/gke-node-pool/main.tf:68-76 at develop c765092f4, "the label is required for
workloads using nodeSelectors"), but an on-demand node and a reserved node carry no label that
tells them apart. Kueue's ResourceFlavor matches on ``nodeLabels`` equality only (kueue
pkg/scheduler/flavorassigner/flavorassigner.go), and copies the chosen flavor's labels into
the pod's nodeSelector (pkg/podset/podset.go FromAssignment): a flavor per mode needs one key
whose value is the mode on every pool. The pool sets it through gke-node-pool's
``kubernetes_labels`` (variables.tf ``kubernetes_labels``, merged into node_config.labels).

Taints: TPU nodes carry ``google.com/tpu`` (the toolkit's tpu-definition module); queued
provisioning nodes also ``cloud.google.com/gke-queued=true:NoSchedule``, which GKE applies
(gke-node-pool variables.tf ``enable_queued_provisioning``: "adds the
cloud.google.com/gke-queued taint"; the toolkit's examples/gke-consumption-options/
dws-flex-start-queued-provisioning/gke-tpu-v6e/tpu-v6e-test-job.yaml tolerates it, "Mandatory
for Queued Provisioning"). Spot pools get GKE's ``cloud.google.com/gke-spot=true:NoSchedule``
only where a taint is asked for; tolerating it costs nothing where it is absent.

Pool names carry the generation's prefix (flows/config/tpu.py ``pool_prefix``: gke-tpu-v6e,
gke-tpu-v5p, gke-tpu-7x, as Cluster Toolkit's examples name their pools). The reservation's
static pool and a lone pool are ``<prefix>-pool`` (for v6e the example's ``gke-tpu-v6e-pool``,
so a profile of one mode and one zone builds the pool it always did). Otherwise
``<prefix>-<mode>-<zone suffix>`` (``gke-tpu-v6e-flex-b``): at most 36 characters with
gke-node-pool's per-slice ``-N`` suffix (variables.tf ``name`` validation; main.tf names pools
``<name>-<index>`` when num_slices > 1). The names are persisted: a pool's name (and the
module id of every pool after the first, which is its name) is its Terraform address, and a
renamed one is destroyed and created anew by the next deploy, so v6e's stay as they were.
The first pool's module id is the example's (``BASE_POOL``), whose settings the other
pools copy; a team's pools each have their own name as module id, the first too, so a
pool's Terraform address does not depend on which profile deploys.

A team's pools (a profile the teams file names, deployments/teams.yaml) are the team's own,
on a cluster several teams share (docs/decisions/0036-a-node-pool-per-team.md): named
``tpu-<team>-<generation>-<mode>-<zone suffix>-<digest>`` (``team_pool_name``), where the
digest is of the team and the slice (generation, machine type, topology, num_slices), so two
slices of one team, or one slice of two teams, never take one name; two profiles of one
team and one slice share the pools. The name depends on nothing but the team's own member,
so adding another team to the file never renames a pool. Such a pool carries the label
``tpurl/team`` and the taint ``tpurl/team=<team>:NoSchedule``: only pods that tolerate the
team's taint (its own) land there, and its pods select it. Pure.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from flows.config.capacity import CapacityMode
from flows.config.gke import GkeSection
from flows.config.tpu import TPU_GENERATIONS

CAPACITY_LABEL = "tpurl/capacity"
TEAM_LABEL = "tpurl/team"
POOL_NAME_MAX = 36
"""gke-node-pool's name limit (variables.tf ``name`` validation: at most 40 characters, an
RFC 1035 label) less the ``-N`` its main.tf appends per slice when num_slices > 1 (up to
``-999``)."""
QUEUED_LABEL = "cloud.google.com/gke-queued"
SPOT_LABEL = "cloud.google.com/gke-spot"
FLEX_START_LABEL = "cloud.google.com/gke-flex-start"
ZONE_LABEL = "topology.kubernetes.io/zone"
BASE_POOL = "gke-tpu-v6e-pool"  # the example's TPU pool module id (and v6e's pool name)

# The label GKE (or the toolkit, for queued) puts on every node of a pool of the mode.
_PROVIDER_LABELS: dict[str, dict[str, str]] = {
    "spot": {SPOT_LABEL: "true"},
    "flex-start": {FLEX_START_LABEL: "true"},
    "queued": {QUEUED_LABEL: "true"},
}
_TPU_TOLERATION = {"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"}
_MODE_TOLERATIONS: dict[str, list[dict[str, str]]] = {
    "queued": [{"key": QUEUED_LABEL, "operator": "Equal", "value": "true",
                "effect": "NoSchedule"}],
    "spot": [{"key": SPOT_LABEL, "operator": "Equal", "value": "true", "effect": "NoSchedule"}],
}
_SHORT = {"reservation": "res", "on-demand": "od", "spot": "spot", "flex-start": "flex",
          "queued": "queued"}


def pool_kubernetes_labels(mode: str, team: str | None = None) -> dict[str, str]:
    """The labels the blueprint sets on a pool of ``mode`` (gke-node-pool kubernetes_labels),
    and, for a team's pool, the team's."""
    return {CAPACITY_LABEL: mode, **({TEAM_LABEL: team} if team else {})}


def team_taint(team: str) -> dict[str, str]:
    """The taint every node of ``team``'s TPU pools carries (gke-node-pool ``taints``, whose
    effect is spelled as the GKE API spells it: NO_SCHEDULE), in Kubernetes' spelling."""
    return {"key": TEAM_LABEL, "value": team, "effect": "NoSchedule"}


def team_toleration(team: str) -> dict[str, str]:
    """What a team's pod tolerates to land on its team's pools, and no other team's."""
    return {"key": TEAM_LABEL, "operator": "Equal", "value": team, "effect": "NoSchedule"}


def provider_node_labels(mode: str) -> dict[str, str]:
    """The label GKE (or the toolkit) itself puts on a ``mode`` node, if any: what a JobSet
    can select on a pool deployed before ``tpurl/capacity`` existed."""
    return dict(_PROVIDER_LABELS.get(mode, {}))


def pool_node_labels(mode: str, team: str | None = None) -> dict[str, str]:
    """Every capacity label a node of a ``mode`` pool carries: ours and GKE's (a node also has
    the accelerator, topology, node-pool and zone labels, which do not depend on the mode),
    and a team's pool its team's."""
    return {**pool_kubernetes_labels(mode, team), **_PROVIDER_LABELS.get(mode, {})}


def pool_taints(mode: str, team: str | None = None) -> list[dict[str, str]]:
    """The taints a node of a ``mode`` pool carries beside google.com/tpu (GKE's own), and
    a team's pool its team's."""
    out = [team_taint(team)] if team else []
    if mode == "queued":
        return [{"key": QUEUED_LABEL, "value": "true", "effect": "NoSchedule"}, *out]
    return out


def job_node_selector(mode: str) -> dict[str, str]:
    """What a TPU pod of a JobSet meant for ``mode`` adds to its nodeSelector: matches that
    mode's pools only (and its Kueue flavor only: the flavor's nodeLabels are the same)."""
    return pool_node_labels(mode)


def job_tolerations(mode: str) -> list[dict[str, str]]:
    """The TPU pod's tolerations for ``mode``: the TPU taint always, the mode's own."""
    return [dict(_TPU_TOLERATION), *(dict(t) for t in _MODE_TOLERATIONS.get(mode, []))]


def flavor_name(mode: str, generation: str = "v6e") -> str:
    """Kueue's ResourceFlavor for ``mode``'s TPU pools of ``generation`` (the example's name
    for reservation, so a reservation cluster's flavor keeps its name; the prefix is the
    generation's, flows/config/tpu.py)."""
    prefix = TPU_GENERATIONS[generation].flavor_prefix
    return f"{prefix}-flavor" if mode == "reservation" else f"{prefix}-{_SHORT[mode]}-flavor"


def zone_suffix(zone: str) -> str:
    """``us-east5-b`` → ``b``: what tells the zones of one region apart."""
    return zone.rsplit("-", 1)[-1]


@dataclass(frozen=True)
class TpuPool:
    """One TPU node pool (per slice: gke-node-pool makes num_slices pools ``name-i``)."""

    mode: CapacityMode
    zone: str
    name: str
    autoscaled: bool
    module_id: str  # the blueprint module that builds it: the example's id for the first
    team: str | None = None  # whose pool it is (None: a profile in no team)

    def slice_pools(self, num_slices: int) -> list[str]:
        """The GKE node pools gke-node-pool creates for it (main.tf node_pool ``name``)."""
        return [self.name] if num_slices == 1 else [f"{self.name}-{i}"
                                                    for i in range(num_slices)]


def team_pool_name(gke: GkeSection, mode: str, zone: str, team: str) -> str:
    """Pure: ``team``'s pool of ``mode`` in ``zone`` for the slice of ``gke``: an RFC 1035
    label of at most POOL_NAME_MAX characters, the team's name cut to fit (the digest, of the
    whole team name and the slice, keeps cut names apart)."""
    key = "/".join((team, gke.machine.generation, gke.machine_type, gke.topology,
                    str(gke.num_slices)))
    digest = hashlib.sha256(key.encode()).hexdigest()[:5]
    generation = gke.machine.generation.replace("tpu", "")
    tail = f"-{generation}-{_SHORT[mode]}-{zone_suffix(zone)}-{digest}"
    room = POOL_NAME_MAX - len("tpu-") - len(tail)
    return f"tpu-{team[:room].rstrip('-')}{tail}"


def pool_name(gke: GkeSection, mode: str, zone: str, team: str | None = None) -> str:
    """The pool of ``mode`` in ``zone`` (see the module's docstring); ``team``'s own when
    the profile is in a team."""
    if team:
        return team_pool_name(gke, mode, zone, team)
    prefix = gke.machine.facts.pool_prefix
    lone = len(gke.capacity_chain) == 1 and len(gke.zone_order) == 1
    if mode == "reservation" or lone:
        return f"{prefix}-pool"
    return f"{prefix}-{_SHORT[mode]}-{zone_suffix(zone)}"


def tpu_pools(gke: GkeSection, team: str | None = None) -> tuple[TpuPool, ...]:
    """Every TPU pool the profile's cluster has for it, in the order tried: per mode of the
    chain, per zone of gke.zones; a reservation is one static pool in gke.zone (its zone).
    ``team``: the profile's team, whose own pools they are (None: in no team)."""
    out: list[TpuPool] = []
    for mode in gke.capacity_chain:
        zones = (gke.zone,) if mode == "reservation" else gke.zone_order
        for zone in zones:
            name = pool_name(gke, mode, zone, team)
            out.append(TpuPool(mode, zone, name, mode != "reservation",
                               BASE_POOL if not out and not team else name, team))
    return tuple(out)


def slice_zone(gke: GkeSection, mode: str) -> str | None:
    """The zone a ``mode`` slice comes up in when only one is possible: a reservation's
    (gke.zone), or the one zone of gke.zones; None when the autoscaler picks among several.
    What the Pathways head is placed by (jobs/pathways.py): in the slice's zone, its gRPC
    traffic to the workers stays inside the zone."""
    if mode == "reservation" or len(gke.zone_order) == 1:
        return gke.zone
    return None


def pools_of_mode(gke: GkeSection, mode: str, team: str | None = None) -> tuple[TpuPool, ...]:
    return tuple(p for p in tpu_pools(gke, team) if p.mode == mode)


def mode_of_node(labels: dict[str, Any]) -> str | None:
    """Which mode a node serves, from its labels (None: not one of our TPU pools)."""
    value = labels.get(CAPACITY_LABEL)
    return str(value) if value else None
