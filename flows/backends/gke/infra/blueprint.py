"""The tutorial's blueprint edit, as a YAML transformation that fails loudly.

The tutorial edits gke-tpu-v6e-advanced.yaml by hand. Here the edits are data
(deployments/blueprints/*.edits.yaml) applied to the document's structure: find the module by
``id`` in ``deployment_groups[*].modules``, then edit one list setting. Why fail instead of
skipping: a toolkit upgrade that renames the module would otherwise deploy a cluster whose
TPU pods cannot write checkpoints, found out hours later. ruamel's round trip keeps the
example's comments and ``$(vars.x)`` expressions untouched.
"""

from __future__ import annotations

import copy
import io
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from flows.backends.gke.capacity_pools import BASE_POOL, TEAM_LABEL, team_taint, tpu_pools
from flows.backends.gke.infra.cluster_shape import UNKNOWN_RESERVATION, ClusterShape
from flows.backends.gke.infra.kueue_objects import kueue_configuration_text
from flows.backends.gke.team_identity import (
    NODE_ACCOUNT_MODULE,
    team_node_account_module,
    team_node_account_name,
)
from flows.common.paths import REPO_ROOT
from flows.config.gke import GkeSection
from flows.core.failures import user_error
from flows.core.safe_writes import write_text

BLUEPRINTS_DIR = REPO_ROOT / "deployments" / "blueprints"
EDITS_FILE = BLUEPRINTS_DIR / "tpu-cluster.edits.yaml"


_UNSET = object()


@dataclass(frozen=True)
class BlueprintEdit:
    """One of: a list edit (``module``/``setting``/``add``); a var edit (``var``/``value``,
    optionally with a file from deployments/blueprints/ staged beside the blueprint); a
    setting edit (``module``/``setting``, a dotted path below ``settings``, with ``set`` or
    ``remove``), whose string values may name facts of the profile ({hosts_per_slice},
    {max_run_seconds}). ``iam_modes`` and ``capacity_modes`` restrict where an edit applies,
    ``zones_only`` to a profile that lists gke.zones, ``generations`` to the profile's TPU
    generations and ``multi_host_only`` to a slice of several hosts. An ``add_module`` edit
    inserts a module (``module`` given whole) before the module ``before``; a ``use`` edit
    adds a module id to a module's ``use`` list and drops the settings in ``drops``, which
    would otherwise win over the used module's outputs (gcluster skips an output whose
    input is set explicitly: cluster-toolkit pkg/config/expand.go useModule). A
    ``kueue_manifest`` edit turns kubectl-apply's Kueue install off and applies its Kueue
    objects as an ``apply_manifests`` entry of that name, after the module ``after``
    (``kueue_objects_as_manifest``). An edit of
    the TPU pool module (``POOL_MODULE``) applies to every TPU pool of the profile, each in
    its own mode."""

    id: str
    module: str = ""
    setting: str = ""
    add: str = ""
    replaces: str | None = None
    iam_modes: tuple[str, ...] = ()
    var: str = ""
    value: str = ""
    stage: str = ""
    stage_as: str = ""
    capacity_modes: tuple[str, ...] = ()
    set: Any = _UNSET
    remove: bool = False
    zones_only: bool = False
    generations: tuple[str, ...] = ()
    multi_host_only: bool = False
    add_module: dict[str, Any] | None = None
    before: str = ""
    use: str = ""
    drops: tuple[str, ...] = ()
    kueue_manifest: str = ""
    after: str = ""

    @property
    def is_setting_edit(self) -> bool:
        return self.remove or self.set is not _UNSET


def load_edits(path: Path = EDITS_FILE) -> list[BlueprintEdit]:
    doc = YAML(typ="safe").load(path.read_text())
    return [BlueprintEdit(e["id"], e.get("module", ""), e.get("setting", ""), e.get("add", ""),
                          e.get("replaces"), tuple(e.get("iam_modes", ())), e.get("var", ""),
                          e.get("value", ""), e.get("stage", ""), e.get("stage_as", ""),
                          tuple(e.get("capacity_modes", ())), e.get("set", _UNSET),
                          bool(e.get("remove", False)), bool(e.get("zones_only", False)),
                          tuple(e.get("generations", ())), bool(e.get("multi_host_only", False)),
                          e.get("add_module"), e.get("before", ""), e.get("use", ""),
                          tuple(e.get("drops", ())), e.get("kueue_manifest", ""),
                          e.get("after", ""))
            for e in doc["edits"]]


POOL_MODULE = BASE_POOL  # the example's TPU pool module (id), which every pool copies


@dataclass(frozen=True)
class SliceFacts:
    """What a pool of another member's slice sets itself instead of the deploy vars, which
    are the deploying profile's: its machine, topology, slice count, reservation, and the
    facts its mode's edits name."""

    machine_type: str
    topology: str
    num_slices: int
    hosts_per_slice: int
    max_run_seconds: int
    reservation: str | None


@dataclass(frozen=True)
class PoolPlan:
    """One TPU pool module of the edited blueprint: its mode, zone, GKE name and module id
    (flows/backends/gke/capacity_pools.py). The first is the example's own module unless
    every pool is a team's. ``team``: whose pool it is; ``slice``: set when the blueprint
    holds pools of several slices, each pool then naming its own."""

    mode: str
    zone: str
    name: str
    module_id: str
    team: str | None = None
    slice: SliceFacts | None = None


@dataclass(frozen=True)
class EditContext:
    """What decides which edits apply, and the facts their values may name. ``pools``: the
    TPU pools in the order tried (none given: the example's one pool, in ``capacity``);
    ``zones``: gke.zones when the profile lists them; ``staged``: files staged beside the
    blueprint with their text for this profile (name → text), instead of the shipped file;
    ``generation`` and ``multi_host``: the slice's TPU generation and whether it spans hosts."""

    iam_mode: str
    capacity: str = "reservation"
    facts: tuple[tuple[str, Any], ...] = ()
    pools: tuple[PoolPlan, ...] = ()
    zones: tuple[str, ...] = ()
    staged: tuple[tuple[str, str], ...] = ()
    generation: str = "v6e"
    multi_host: bool = False


def _slice_facts(gke: GkeSection) -> SliceFacts:
    seconds = int(gke.max_run_hours * 3600) if gke.max_run_hours else 0
    return SliceFacts(gke.machine_type, gke.topology, gke.num_slices, gke.hosts_per_slice,
                      seconds, gke.reservation)


def live_reservations(cluster: dict[str, Any] | None) -> dict[str, str]:
    """Pure: pool name → the reservation a live pool consumes (container v1 NodePool
    ``config.reservationAffinity.values``, ``projects/P/reservations/NAME``)."""
    out = {}
    for pool in (cluster or {}).get("nodePools") or []:
        values = ((pool.get("config") or {}).get("reservationAffinity") or {}).get("values")
        if values:
            out[str(pool.get("name"))] = str(values[0]).rsplit("/", 1)[-1]
    return out


def union_pools(gke: GkeSection, shape: ClusterShape | None = None,
                team: str | None = None,
                reservations: dict[str, str] | None = None,
                profile: str = "") -> tuple[PoolPlan, ...]:
    """Pure: every TPU pool of the cluster: each member's of the shape (the teams file's
    profiles on it, in its order; the deploying profile's own when no shape is given), each
    pool once (two profiles of one team and one slice share theirs). With pools of more than
    one slice or owner, every pool names its own slice (``SliceFacts``), so a pool's block
    is the same whichever member deploys.

    Another member's reservation is not known here when its profile takes it from its own
    deployment's environment (cluster_shape.UNKNOWN_RESERVATION): its pool keeps the
    reservation the live pool consumes (``reservations``, live_reservations), and a pool
    that does not exist yet is left to that member's own deploy. The deploying ``profile``'s
    own member is its ``gke`` as given (the settings the deploy runs with)."""
    members = [(gke if m.profile == profile else m.gke, m.team)
               for m in shape.members] if shape else [(gke, team)]
    out: dict[str, PoolPlan] = {}
    for member_gke, member_team in members:
        for p in tpu_pools(member_gke, member_team):
            facts = _slice_facts(member_gke)
            if p.mode == "reservation" and facts.reservation == UNKNOWN_RESERVATION:
                if p.name not in (reservations or {}):
                    continue
                facts = replace(facts, reservation=(reservations or {})[p.name])
            out.setdefault(p.name, PoolPlan(p.mode, p.zone, p.name, p.module_id, p.team,
                                            facts))
    pools = list(out.values())
    legacy = [p for p in pools if p.team is None]
    if legacy:  # one profile in no team: its pools first, the example's module its first
        pools = [*legacy, *(p for p in pools if p.team is not None)]
        pools = [replace(p, module_id=POOL_MODULE if i == 0 else p.name)
                 for i, p in enumerate(pools)]
    shared = len({(p.team, p.slice) for p in pools}) > 1
    return tuple(p if shared or p.team else replace(p, slice=None) for p in pools)


def edit_context(gke: GkeSection, shape: ClusterShape | None = None,
                 team: str | None = None,
                 reservations: dict[str, str] | None = None,
                 profile: str = "") -> EditContext:
    """The cluster's modes, pools and zones (every member's: ``union_pools``), and the facts
    the capacity edits name; the Kueue configuration staged beside it is the cluster
    shape's (kueue_objects.py)."""
    seconds = int(gke.max_run_hours * 3600) if gke.max_run_hours else 0
    pools = union_pools(gke, shape, team, reservations, profile)
    zones = list(gke.zones or ())
    listed = [m.gke for m in (shape.members if shape else ()) if m.gke.zones]
    if listed and len(shape.members if shape else ()) > 1:
        zones = []  # every member's zones, in the file's order: the same for each deploy
        for member in (shape.members if shape else ()):
            zones += [z for z in member.gke.zone_order if z not in zones]
    return EditContext(gke.iam_mode, pools[0].mode,
                       (("hosts_per_slice", gke.hosts_per_slice), ("max_run_seconds", seconds),
                        ("tpu_quota", shape.chips if shape else gke.total_chips)),
                       pools, tuple(zones),
                       (("kueue-configuration.yaml.tftpl",
                         kueue_configuration_text(gke, shape=shape)),),
                       gke.machine.generation, gke.hosts_per_slice > 1)


def _applies(edit: BlueprintEdit, ctx: EditContext) -> bool:
    return ((not edit.iam_modes or ctx.iam_mode in edit.iam_modes)
            and (not edit.capacity_modes or ctx.capacity in edit.capacity_modes)
            and (not edit.zones_only or bool(ctx.zones))
            and (not edit.generations or ctx.generation in edit.generations)
            and (not edit.multi_host_only or ctx.multi_host))


def _fill(value: Any, facts: dict[str, Any]) -> Any:
    """Facts into an edit's value: a whole "{fact}" becomes the number, else text formatting."""
    if isinstance(value, dict):
        return {k: _fill(v, facts) for k, v in value.items()}
    if isinstance(value, str):
        key = value.strip("{}")
        if value == "{" + key + "}" and key in facts:
            return facts[key]
        return value.format(**facts) if "{" in value else value
    return value


_FIX = ("update deployments/blueprints/tpu-cluster.edits.yaml for this version, or "
        "pin gke.cluster_toolkit_version to v1.103.0")


def apply_setting_edit(doc: Any, edit: BlueprintEdit, facts: dict[str, Any]) -> bool:
    """Set or remove one (possibly nested) setting of a module; True if the document changed.
    A ``remove`` of a setting that is not there is an error, not a no-op: the example has
    changed under the edit, and what the edit meant to prevent may now happen another way
    (the example dropped static_node_count and gcluster fills it in)."""
    module = find_module(doc, edit.module, edit.id)
    node = module.get("settings")
    *parents, leaf = edit.setting.split(".")
    for part in parents:
        node = node.get(part) if isinstance(node, dict) else None
    if not isinstance(node, dict):
        raise user_error("infra", f"module {edit.module!r} has no setting {edit.setting!r} (edit "
                         f"{edit.id})", "the Cluster Toolkit example changed",
                         _FIX)
    if edit.remove:
        if leaf not in node:
            raise user_error("infra", f"edit {edit.id} removes {edit.module}.{edit.setting}, which the "
                             "blueprint does not have",
                             f"settings there: {', '.join(map(str, node)) or '(none)'}", _FIX)
        node.pop(leaf)
        return True
    value = _fill(edit.set, facts)
    if node.get(leaf, _UNSET) == value:
        return False
    node[leaf] = value
    return True


def apply_var_edit(doc: Any, edit: BlueprintEdit) -> bool:
    variables = doc.get("vars") if isinstance(doc, dict) else None
    if not isinstance(variables, dict) or edit.var not in variables:
        raise user_error("infra", f"the blueprint has no var {edit.var!r} (edit {edit.id})",
                         f"vars present: {', '.join(map(str, variables or {})) or '(none)'}",
                         f"the Cluster Toolkit example changed: {_FIX}")
    if variables[edit.var] == edit.value:
        return False
    variables[edit.var] = edit.value
    return True


def _yaml() -> YAML:
    yaml = YAML()
    yaml.preserve_quotes = True
    yaml.width = 4096
    return yaml


def find_module(doc: Any, module_id: str, edit_id: str = "") -> Any:
    groups = doc.get("deployment_groups") if isinstance(doc, dict) else None
    if not isinstance(groups, list):
        raise user_error("infra", "the blueprint has no deployment_groups list",
                         "expected a Cluster Toolkit blueprint", "check the bundle's example file")
    found = _module_or_none(doc, module_id)
    if found is not None:
        return found
    ids = [str(module.get("id")) for group in groups
           for module in (group or {}).get("modules") or []]
    raise user_error("infra", f"module {module_id!r} not found in the blueprint"
                     + (f" (edit {edit_id})" if edit_id else ""),
                     f"module ids present: {', '.join(ids) or '(none)'}",
                     f"the Cluster Toolkit example changed: {_FIX}")


def apply_add_module(doc: Any, edit: BlueprintEdit) -> bool:
    """Insert ``edit.add_module`` before the module ``edit.before``, in its group. A module
    of that id already there is the edit applied before if equal, else an error: the
    example now has a module of that id of its own, which the edit would shadow."""
    assert edit.add_module is not None
    module_id = str(edit.add_module.get("id"))
    found = _module_or_none(doc, module_id)
    if found is not None:
        if _plain(found) == edit.add_module:
            return False
        raise user_error("infra", f"edit {edit.id} adds module {module_id!r}, which the "
                         "blueprint already has with other settings",
                         "the Cluster Toolkit example changed", _FIX)
    anchor = find_module(doc, edit.before, edit.id)
    for group in doc["deployment_groups"]:
        modules = group.get("modules") or []
        for at, module in enumerate(modules):
            if module is anchor:
                modules.insert(at, copy.deepcopy(edit.add_module))
                return True
    return False  # find_module found it in a group, so this is not reached


def apply_use_edit(doc: Any, edit: BlueprintEdit) -> bool:
    """Add ``edit.use`` to the module's ``use`` list and drop ``edit.drops`` from its
    settings (an explicit setting wins over a used module's output, expand.go useModule)."""
    if _module_or_none(doc, edit.use) is None:
        raise user_error("infra", f"edit {edit.id} makes {edit.module!r} use {edit.use!r}, "
                         "which the blueprint does not have",
                         "an add_module edit before it must add that module", _FIX)
    module = find_module(doc, edit.module, edit.id)
    changed = False
    uses = module.get("use")
    if uses is None:
        module["use"] = uses = []
    if edit.use not in uses:
        uses.append(edit.use)
        changed = True
    settings = module.get("settings") or {}
    for setting in edit.drops:
        if setting in settings:
            settings.pop(setting)
            changed = True
    return changed


def kueue_objects_as_manifest(doc: Any, edit: BlueprintEdit) -> bool:
    """kubectl-apply's ``kueue.install`` off, and its ``kueue.config_path`` rendered with
    ``kueue.config_template_vars`` as an ``apply_manifests`` entry named ``edit.kueue_manifest``
    instead: the module applies ``config_path`` only when it installs Kueue (cluster-toolkit
    modules/management/kubectl-apply/main.tf, configure_kueue), while an entry whose source
    is a .tftpl is rendered by the same templatefile (main.tf processed_apply_manifests_map).
    The ``kueue`` settings stay as they are otherwise (the quota edits keep finding
    ``config_template_vars``): with install false the module reads them for nothing. Its
    ``gke_cluster_exists``, on which the manifests and the JobSet install depend (main.tf
    depends_on), becomes an expression over ``edit.after``'s release, so the objects are
    applied once Kueue's webhooks run (direct-helm-install outputs.tf release_completion_id)."""
    if _module_or_none(doc, edit.after) is None:
        raise user_error("infra", f"edit {edit.id} makes {edit.module!r} wait for {edit.after!r}, "
                         "which the blueprint does not have",
                         "an add_module edit before it must add that module", _FIX)
    module = find_module(doc, edit.module, edit.id)
    settings = module.get("settings")
    kueue = settings.get("kueue") if isinstance(settings, dict) else None
    if not isinstance(kueue, dict) or not kueue.get("config_path"):
        raise user_error("infra", f"module {edit.module!r} has no kueue.config_path (edit "
                         f"{edit.id})", "the Cluster Toolkit example changed", _FIX)
    manifests = settings.get("apply_manifests")
    if manifests is None:
        settings["apply_manifests"] = manifests = []
    entry = {"name": edit.kueue_manifest, "source": kueue["config_path"],
             "template_vars": copy.deepcopy(_plain(kueue.get("config_template_vars") or {}))}
    waits = f'$({edit.after}.release_completion_id != "")'
    present = [m for m in manifests if isinstance(m, dict) and m.get("name") == edit.kueue_manifest]
    if present and _plain(present[0]) == entry and kueue.get("install") is False \
            and settings.get("gke_cluster_exists") == waits:
        return False
    for old in present:
        manifests.remove(old)
    manifests.append(entry)
    kueue["install"] = False
    settings["gke_cluster_exists"] = waits
    return True


def _module_or_none(doc: Any, module_id: str) -> Any:
    for group in doc.get("deployment_groups") or []:
        for module in (group or {}).get("modules") or []:
            if module.get("id") == module_id:
                return module
    return None


def _plain(node: Any) -> Any:
    """ruamel's round-trip nodes as plain dicts and lists, to compare with loaded edits."""
    if isinstance(node, dict):
        return {str(k): _plain(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_plain(v) for v in node]
    return node


def apply_edit(doc: Any, edit: BlueprintEdit) -> bool:
    """Apply one edit in place; True if the document changed (False: already applied)."""
    if edit.is_setting_edit:
        return apply_setting_edit(doc, edit, {})
    if edit.var:
        return apply_var_edit(doc, edit)
    if edit.add_module is not None:
        return apply_add_module(doc, edit)
    if edit.use:
        return apply_use_edit(doc, edit)
    if edit.kueue_manifest:
        return kueue_objects_as_manifest(doc, edit)
    module = find_module(doc, edit.module, edit.id)
    settings = module.get("settings")
    values = settings.get(edit.setting) if isinstance(settings, dict) else None
    if not isinstance(values, list):
        raise user_error("infra", f"module {edit.module!r} has no list setting {edit.setting!r} "
                         f"(edit {edit.id})",
                         f"settings keys: {', '.join(map(str, settings or {})) or '(none)'}",
                         "update deployments/blueprints/tpu-cluster.edits.yaml")
    if edit.add in values:
        return False
    if edit.replaces and edit.replaces not in values:
        raise user_error("infra", f"edit {edit.id} replaces {edit.replaces!r} in {edit.module}."
                         f"{edit.setting}, which holds no such entry",
                         f"entries: {', '.join(map(str, values)) or '(none)'}", _FIX)
    if edit.replaces:
        values[values.index(edit.replaces)] = edit.add
    else:
        values.append(edit.add)
    return True


def _pool_modules(doc: Any, ctx: EditContext) -> tuple[PoolPlan, ...]:
    """The TPU pool modules, made: each pool is a copy of the example's module as the
    example has it (before any edit), with its own id, GKE name and zone, inserted in its
    place. The example's module itself is the first pool when that pool takes its id
    (a profile in no team: it stays in $(vars.zone), gke.zone, the reservation's zone), and
    is removed when every pool is a team's (each keeps the id it always has, its name).
    A pool that names its slice sets its machine, topology, slice count and reservation
    itself; a team's pool carries its team's label and taint (capacity_pools.py)."""
    if not ctx.pools:
        return (PoolPlan(ctx.capacity, "", "", POOL_MODULE),)
    base = find_module(doc, POOL_MODULE)
    pristine = copy.deepcopy(base)
    keep_base = ctx.pools[0].module_id == POOL_MODULE
    for group in doc["deployment_groups"]:
        modules = group.get("modules") or []
        if not any(m is base for m in modules):
            continue
        at = next(i for i, m in enumerate(modules) if m is base)
        made = []
        for pool in ctx.pools:
            module = base if pool.module_id == POOL_MODULE else copy.deepcopy(pristine)
            settings = module["settings"]
            module["id"] = pool.module_id
            if pool.name != POOL_MODULE:
                settings["name"] = pool.name
            if module is not base:
                settings["zones"] = [pool.zone]
            _own_slice(settings, pool)
            made.append(module)
        modules[at:at + 1] = made
    if not keep_base:
        _quota_without_base(doc, ctx)
    _team_node_accounts(doc, ctx.pools)
    return ctx.pools


def _team_node_accounts(doc: Any, pools: tuple[PoolPlan, ...]) -> None:
    """A node account per team (modules/project/service-account, beside the example's
    ``node_pool_service_account``, with its project roles but no storage role: the infra
    stage grants the team's bucket alone, infra/iam.py), and each team pool using it in
    place of the example's (gke-node-pool's ``service_account_email`` is the used module's
    output of that name: gcluster pkg/config/expand.go useModule)."""
    teams = list(dict.fromkeys(p.team for p in pools if p.team))
    if not teams:
        return
    example = find_module(doc, NODE_ACCOUNT_MODULE)
    roles = [r for r in (example.get("settings") or {}).get("project_roles") or []
             if not str(r).startswith("storage.")]
    for group in doc["deployment_groups"]:
        modules = group.get("modules") or []
        if not any(m is example for m in modules):
            continue
        at = next(i for i, m in enumerate(modules) if m is example) + 1
        for team in teams:
            module_id = team_node_account_module(team)
            if _module_or_none(doc, module_id) is None:
                modules.insert(at, {"id": module_id, "source": SERVICE_ACCOUNT_MODULE,
                                    "settings": {"name": team_node_account_name(team),
                                                 "project_roles": list(roles)}})
                at += 1
    for pool in pools:
        if not pool.team:
            continue
        module = find_module(doc, pool.module_id)
        uses = [u for u in module.get("use") or [] if u != NODE_ACCOUNT_MODULE]
        module["use"] = [*uses, team_node_account_module(pool.team)]
        (module.get("settings") or {}).pop("service_account_email", None)


def _own_slice(settings: Any, pool: PoolPlan) -> None:
    """The pool's own slice and team in its module's settings (gke-node-pool variables.tf:
    machine_type, num_slices, placement_policy, reservation_affinity, taints)."""
    if pool.slice is not None:
        facts = pool.slice
        settings["machine_type"] = facts.machine_type
        settings["num_slices"] = facts.num_slices
        if isinstance(settings.get("placement_policy"), dict):
            settings["placement_policy"]["tpu_topology"] = facts.topology
        affinity = settings.get("reservation_affinity")
        if isinstance(affinity, dict) and facts.reservation:
            for entry in affinity.get("specific_reservations") or []:
                entry["name"] = facts.reservation
    if pool.team:  # gke-node-pool spells the effect as the GKE API does
        settings["taints"] = [{**team_taint(pool.team), "effect": "NO_SCHEDULE"}]


def _quota_without_base(doc: Any, ctx: EditContext) -> None:
    """With the example's pool module gone, Kueue's base TPU quota (the queue of profiles
    in no team) is the cluster's chips, a number, not an expression over that module's
    outputs."""
    install = _module_or_none(doc, "workload-manager-install")
    variables = (((install or {}).get("settings") or {}).get("kueue") or {}).get(
        "config_template_vars")
    if isinstance(variables, dict) and "tpu_quota" in variables:
        variables["tpu_quota"] = dict(ctx.facts).get("tpu_quota", 0)


def _pool_facts(pool: PoolPlan) -> dict[str, Any]:
    if pool.slice is None:
        return {}
    return {"hosts_per_slice": pool.slice.hosts_per_slice,
            "max_run_seconds": pool.slice.max_run_seconds}


def edit_blueprint(text: str, iam_mode: str | EditContext,
                   edits: list[BlueprintEdit] | None = None) -> str:
    """Pure: the example blueprint's text → the edited text for this IAM mode, capacity
    chain and zones: one TPU pool module per pool of the context, each edited for its mode."""
    ctx = iam_mode if isinstance(iam_mode, EditContext) else EditContext(iam_mode)
    facts = {**dict(ctx.facts), "zones": list(ctx.zones)}
    yaml = _yaml()
    doc = yaml.load(text)
    pools = _pool_modules(doc, ctx)
    for edit in load_edits() if edits is None else edits:
        if (edit.is_setting_edit or edit.use) and edit.module == POOL_MODULE:
            for pool in pools:
                per_pool = replace(ctx, capacity=pool.mode)
                if not _applies(edit, per_pool):
                    continue
                if edit.use:
                    apply_use_edit(doc, replace(edit, module=pool.module_id))
                else:
                    apply_setting_edit(doc, replace(edit, module=pool.module_id),
                                       {**facts, **_pool_facts(pool), "capacity": pool.mode})
                    if edit.setting == "kubernetes_labels" and pool.team:
                        _module_or_none(doc, pool.module_id)["settings"][
                            "kubernetes_labels"][TEAM_LABEL] = pool.team
        elif edit.setting.startswith("kueue.config_template_vars") and _module_or_none(
                doc, POOL_MODULE) is None:
            continue  # the quota is the cluster's chips (_quota_without_base)
        elif _applies(edit, ctx):
            if edit.add_module is not None and edit.before == POOL_MODULE:
                edit = replace(edit, before=pools[0].module_id)
            if edit.is_setting_edit:
                apply_setting_edit(doc, edit, facts)
            else:
                apply_edit(doc, edit)
    out = io.StringIO()
    yaml.dump(doc, out)
    return out.getvalue()


def write_edited(example: Path, dest: Path, iam_mode: str | EditContext) -> Path:
    """The edited blueprint, and beside it each file an edit stages (ghpc_stage resolves
    relative paths against the blueprint's folder: cluster-toolkit pkg/config/staging.go)."""
    ctx = iam_mode if isinstance(iam_mode, EditContext) else EditContext(iam_mode)
    dest.parent.mkdir(parents=True, exist_ok=True)
    edits = load_edits()
    write_text(dest, edit_blueprint(example.read_text(), ctx, edits), "the edited blueprint")
    staged = dict(ctx.staged)
    for edit in edits:
        if edit.stage and _applies(edit, ctx):
            text = staged.get(edit.stage) or (BLUEPRINTS_DIR / edit.stage).read_text()
            write_text(dest.parent / (edit.stage_as or edit.stage), text,
                       "a file the blueprint stages")
    return dest


SERVICE_ACCOUNT_MODULE = "modules/project/service-account"


def service_account_roles(text: str, deployment: str, project: str) -> list[tuple[str, str]]:
    """Pure: (member, role) of every project role the blueprint's Terraform grants, the
    IAM the deploy itself makes beside tpurl's gcloud grants (infra/iam.py). Cluster
    Toolkit's modules/project/service-account (main.tf at develop c765092f4) names its
    account ``<deployment_name>-<name>`` (``prefix = var.deployment_name``, ``names =
    [var.name]``) and binds each ``project_roles`` entry as ``roles/<role>`` on the
    project. Why it matters: those bindings propagate as slowly as any other (the IAM
    propagation wait, flows/backends/gke/iam_propagation.py, covers them too)."""
    doc = _yaml().load(text)
    out: list[tuple[str, str]] = []
    for group in (doc or {}).get("deployment_groups") or []:
        for module in (group or {}).get("modules") or []:
            if module.get("source") != SERVICE_ACCOUNT_MODULE:
                continue
            settings = module.get("settings") or {}
            name = settings.get("name")
            if not name:
                continue
            member = f"serviceAccount:{deployment}-{name}@{project}.iam.gserviceaccount.com"
            out += [(member, f"roles/{role}") for role in settings.get("project_roles") or []]
    return out
