"""Each team's TPU node pools on a cluster two teams share (capacity_pools.team_pool_name,
blueprint.union_pools; docs/decisions/0036-a-node-pool-per-team.md): the blueprint any
member deploys holds every member's pools, a team's pool blocks are the same whichever
team deploys, each pool carries its team's label and taint, and a team's TPU pods land on
its own pools only."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from ruamel.yaml import YAML

from flows.backends.gke.capacity_pools import (
    POOL_NAME_MAX,
    TEAM_LABEL,
    team_pool_name,
    tpu_pools,
)
from flows.backends.gke.infra.blueprint import edit_blueprint, edit_context, live_reservations
from flows.backends.gke.infra.commands import blueprint_vars
from flows.backends.gke.infra.pool_owners import own_pools_recreated, pools_of_others_at_risk
from flows.backends.gke.infra.pool_shape import pool_shape_problems
from flows.backends.gke.infra.settings import InfraSettings
from flows.backends.gke.jobs.common import tpu_pod_scheduling
from flows.config import load_profile
from flows.config.teams import TEAM_NAME_MAX
from tests.fakes.cloud.gcluster_expand import deployed_pools, node_pool
from tests.fakes.kube_api.tpu_nodes import fits
from tests.support.profiles import (
    SMOKE,
    SMOKE_REQUIRED,
    TUTORIAL,
    settings_with_teams,
    smoke_profile,
    tutorial_profile,
)

EXAMPLE = Path(__file__).resolve().parents[3] / "fakes" / "cloud" / "gke-tpu-v6e-advanced.yaml"
TWO_TEAMS = (f"teams:\n"
             f"  research: {{usd_per_month: 900, profiles: [{TUTORIAL}]}}\n"
             f"  product: {{usd_per_month: 500, profiles: [{SMOKE}]}}\n")
RFC1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def _blueprint(s: InfraSettings, live: dict[str, Any] | None = None) -> str:
    """The blueprint the deploy of ``s`` writes, on a cluster whose live pools are ``live``."""
    return edit_blueprint(EXAMPLE.read_text(), edit_context(s.gke, s.shape, s.team,
                                                            live_reservations(live)))


def _pool_blocks(text: str) -> dict[str, Any]:
    """Every gke-node-pool module of the blueprint, by id, as plain data."""
    doc = YAML(typ="safe").load(text)
    return {m["id"]: m for g in doc["deployment_groups"] for m in g["modules"]
            if m["source"] == "modules/compute/gke-node-pool"}


def _gke_pools(text: str, s: InfraSettings) -> dict[str, dict[str, Any]]:
    """The GKE node pools the fake gcluster makes of the blueprint, by name."""
    doc = YAML(typ="safe").load(text)
    variables = {**(doc.get("vars") or {}), **blueprint_vars(s)}
    pools, refused = deployed_pools(doc, variables)
    assert refused == []
    out = {}
    for settings in pools.values():
        slices = int(settings["num_slices"])
        for i in range(slices):
            name = settings["name"] if slices == 1 else f"{settings['name']}-{i}"
            out[name] = node_pool(settings, name, "p")
    return out


@pytest.fixture
def two_deploys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                ) -> tuple[InfraSettings, str, InfraSettings, str]:
    """A's deploy first, then B's on the cluster A's made: B's environment names no
    reservation (its on-demand profile has none), so A's pool keeps the live one."""
    a = settings_with_teams(tmp_path, monkeypatch, TWO_TEAMS, TUTORIAL)
    b = settings_with_teams(tmp_path, monkeypatch, TWO_TEAMS, SMOKE)
    text_a = _blueprint(a)
    live = {"nodePools": list(_gke_pools(text_a, a).values())}
    return a, text_a, b, _blueprint(b, live)


def test_deploying_team_b_keeps_team_as_pool_blocks_byte_identical(
        two_deploys: tuple[InfraSettings, str, InfraSettings, str]) -> None:
    """The attack: before, B's deploy rendered B's pools alone, and Terraform deleted A's
    reservation pool (or replaced it: both were gke-tpu-v6e-pool). Now each deploy holds
    every member's pools, and A's blocks are the same text in B's deploy."""
    a, text_a, b, text_b = two_deploys
    blocks_a, blocks_b = _pool_blocks(text_a), _pool_blocks(text_b)
    assert blocks_a == blocks_b and len(blocks_a) == 2
    [research] = [k for k in blocks_a if k.startswith("tpu-research-")]
    [product] = [k for k in blocks_a if k.startswith("tpu-product-")]
    assert blocks_a[research]["settings"]["machine_type"] == "ct6e-standard-4t"
    assert blocks_a[research]["settings"]["placement_policy"]["tpu_topology"] == "4x8"
    assert blocks_a[product]["settings"]["placement_policy"]["tpu_topology"] == "2x4"
    # whoever deploys, the pool's Terraform address (module id) and GKE name do not move
    assert blocks_a[research]["settings"]["name"] == research
    # both deploys check their own pools' shape on the one blueprint
    for s, text in ((a, text_a), (b, text_b)):
        assert pool_shape_problems(text, s.gke, blueprint_vars(s), s.team) == []


def test_another_teams_reservation_pool_not_yet_made_is_left_to_its_own_deploy(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """B's environment cannot name A's reservation: before A's pool exists, B's deploy
    builds B's pools only (a pool on a guessed reservation would fail the whole apply)."""
    b = settings_with_teams(tmp_path, monkeypatch, TWO_TEAMS, SMOKE)
    assert [k.split("-")[1] for k in _pool_blocks(_blueprint(b))] == ["product"]


def test_each_teams_pool_is_labelled_and_tainted_its_teams(
        two_deploys: tuple[InfraSettings, str, InfraSettings, str]) -> None:
    a, text_a, _, _ = two_deploys
    pools = _gke_pools(text_a, a)
    research = next(p for n, p in pools.items() if n.startswith("tpu-research-"))
    product = next(p for n, p in pools.items() if n.startswith("tpu-product-"))
    assert research["config"]["labels"] == {"tpurl/capacity": "reservation",
                                            TEAM_LABEL: "research"}
    assert research["config"]["taints"] == [{"key": TEAM_LABEL, "value": "research",
                                             "effect": "NO_SCHEDULE"}]
    assert research["placementPolicy"]["tpuTopology"] == "4x8"
    assert product["config"]["labels"][TEAM_LABEL] == "product"
    assert product["autoscaling"]["maxNodeCount"] == 2  # the smoke slice's 2 hosts
    assert "initialNodeCount" in research  # the reservation's static pool, as before


def _node(pool: dict[str, Any]) -> tuple[dict[str, str], list[dict[str, str]]]:
    """A node of the pool as GKE labels and taints it (the fake kube API's rule: the pool's
    labels, its accelerator and topology, and its taints, GKE's TPU taint among them)."""
    labels = {**pool["config"]["labels"], "cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
              "cloud.google.com/gke-tpu-topology": pool["placementPolicy"]["tpuTopology"]}
    effect = {"NO_SCHEDULE": "NoSchedule"}
    taints = [{"key": "google.com/tpu", "value": "present", "effect": "NoSchedule"},
              *({**t, "effect": effect[t["effect"]]} for t in pool["config"].get("taints", []))]
    return labels, taints


def test_a_teams_tpu_pods_land_on_its_own_pools_only(
        two_deploys: tuple[InfraSettings, str, InfraSettings, str]) -> None:
    """Even a single-mode profile's pods name their team and mode; another team's pod, one
    of no team and one naming another team's topology are all kept off the pool."""
    a, text_a, _, _ = two_deploys
    pools = _gke_pools(text_a, a)
    nodes = {n.split("-")[1]: _node(p) for n, p in pools.items()}
    research_pod = {"spec": tpu_pod_scheduling(tutorial_profile(), "research")}
    assert research_pod["spec"]["nodeSelector"]["tpurl/capacity"] == "reservation"
    assert fits(research_pod, *nodes["research"])
    assert not fits(research_pod, *nodes["product"])
    product_pod = {"spec": tpu_pod_scheduling(smoke_profile(), "product")}
    assert fits(product_pod, *nodes["product"]) and not fits(product_pod, *nodes["research"])
    # the same slice asked for by another team's pod: not tolerated, not selected
    intruder = {"spec": tpu_pod_scheduling(tutorial_profile(), "product")}
    assert not fits(intruder, *nodes["research"])
    teamless = {"spec": tpu_pod_scheduling(tutorial_profile())}
    assert not fits(teamless, *nodes["research"])


@given(team=st.from_regex(r"[a-z]([a-z0-9-]{0,56}[a-z0-9])?", fullmatch=True))
def test_a_team_pool_name_is_a_gke_pool_name_for_any_team_name(team: str) -> None:
    """RFC 1035 and at most POOL_NAME_MAX characters (gke-node-pool's 40 less its per-slice
    suffix), for team names up to the teams file's limit."""
    gke = smoke_profile().gke
    assert gke is not None and len(team) <= TEAM_NAME_MAX
    for mode in ("on-demand", "queued", "flex-start", "reservation", "spot"):
        name = team_pool_name(gke, mode, "us-east5-b", team)
        assert len(name) <= POOL_NAME_MAX and RFC1035.match(name), name


def test_team_names_cut_to_fit_still_name_different_pools() -> None:
    gke = smoke_profile().gke
    assert gke is not None
    long = "a" * TEAM_NAME_MAX
    names = {team_pool_name(gke, "queued", "us-east5-b", t) for t in (long, long[:-1] + "b")}
    assert len(names) == 2 and all(len(n) == POOL_NAME_MAX for n in names)
    # one team, two slices: two pools
    other = load_profile(TUTORIAL, {**SMOKE_REQUIRED, "gke.capacity": "on-demand"},
                         environ={}).gke
    assert other is not None
    assert team_pool_name(gke, "on-demand", "us-east5-b", "t") != \
        team_pool_name(other, "on-demand", "us-east5-b", "t")


def _live(pool: dict[str, Any]) -> dict[str, Any]:
    return {k: pool[k] for k in ("name", "config", "placementPolicy", "queuedProvisioning")
            if k in pool}


def test_a_pool_outside_the_teams_file_is_still_refused_and_the_teams_are_kept(
        two_deploys: tuple[InfraSettings, str, InfraSettings, str]) -> None:
    a, text_a, b, _ = two_deploys
    live = {"nodePools": [_live(p) for p in _gke_pools(text_a, a).values()]}
    record = {"pools_by_profile": {TUTORIAL: [p["name"] for p in live["nodePools"]
                                              if "research" in p["name"]]}}
    # B's deploy keeps A's pool (it is in B's blueprint, unchanged)
    assert pools_of_others_at_risk(live, b, record) == []
    assert own_pools_recreated(live, b, record) == []
    # a pool of a profile the teams file no longer names, on record: refused as before
    stray = {**live["nodePools"][0], "name": "gke-tpu-v6e-spot-c"}
    gone = {**record, "pools_by_profile": {**record["pools_by_profile"],
                                           "an-old-profile": ["gke-tpu-v6e-spot-c"]}}
    [(name, owner, effect)] = pools_of_others_at_risk(
        {"nodePools": [*live["nodePools"], stray]}, b, gone)
    assert (name, owner) == ("gke-tpu-v6e-spot-c", "an-old-profile")
    assert effect.startswith("deleted")


def test_a_teams_pool_of_the_old_name_is_warned_of_before_the_deploy_recreates_it(
        two_deploys: tuple[InfraSettings, str, InfraSettings, str]) -> None:
    """A cluster deployed before pools were per team has the tutorial's gke-tpu-v6e-pool;
    the next deploy deletes it (and creates the team's): the deploy says so first."""
    a, text_a, _, _ = two_deploys
    old = {**_live(next(iter(_gke_pools(text_a, a).values()))), "name": "gke-tpu-v6e-pool"}
    [(name, effect)] = own_pools_recreated({"nodePools": [old]}, a, None)
    assert name == "gke-tpu-v6e-pool" and effect.startswith("deleted")


def test_each_teams_pools_run_as_its_own_node_account_without_storage_roles(
        two_deploys: tuple[InfraSettings, str, InfraSettings, str]) -> None:
    """The blueprint makes one node account per team; its project roles hold no storage
    role (the infra stage grants the team's bucket alone), and each team's pools use it."""
    from flows.backends.gke.infra.blueprint import service_account_roles
    from flows.backends.gke.team_identity import node_account

    a, text_a, _, text_b = two_deploys
    pools = _gke_pools(text_a, a)
    accounts = {n.split("-")[1]: p["config"]["serviceAccount"] for n, p in pools.items()}
    assert accounts == {t: node_account(a.gke.project, a.gke.cluster, t)
                        for t in ("research", "product")}
    roles = service_account_roles(text_a, a.gke.cluster, a.gke.project)
    for account in accounts.values():
        granted = [r for m, r in roles if m == f"serviceAccount:{account}"]
        assert "roles/artifactregistry.reader" in granted
        assert not [r for r in granted if r.startswith("roles/storage.")]
    # the accounts' modules are the same text whichever team deploys
    assert _sa_blocks(text_a) == _sa_blocks(text_b)


def _sa_blocks(text: str) -> dict[str, Any]:
    doc = YAML(typ="safe").load(text)
    return {m["id"]: m for g in doc["deployment_groups"] for m in g["modules"]
            if m["source"] == "modules/project/service-account"}


def test_a_single_mode_teams_pods_are_admitted_on_their_own_modes_flavor_only(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The attack: research's profile has one mode (reservation), product's another
    (on-demand); the team ClusterQueues list both modes' flavors (the cluster's union).
    Before, research's TPU pods named no mode, so with the reservation's quota used up Kueue
    admitted them on the on-demand flavor, whose nodes are product's mode. Now they name
    their mode (and team): only the reservation flavor matches."""
    import yaml

    from flows.backends.gke.infra.admission import admission_problems, assigned_flavor, pod_sets
    from flows.backends.gke.infra.kueue_objects import render_template
    from flows.backends.gke.jobs.manifests import render_all
    from flows.operations.plan import planned_workloads

    s = settings_with_teams(tmp_path, monkeypatch, TWO_TEAMS, TUTORIAL)
    [(_, text)] = edit_context(s.gke, s.shape, s.team).staged
    rendered = render_template(text, {"tpu_quota": "40", "accelerator_type": "tpu-v6e-slice",
                                      "namespace": "default"})  # as Terraform fills them
    docs = [d for d in yaml.safe_load_all(rendered) if d]
    flavors = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ResourceFlavor"}
    queue = next(d for d in docs if d["kind"] == "ClusterQueue"
                 and d["metadata"]["name"] == "team-research")
    profile = tutorial_profile()
    workloads = planned_workloads(profile)
    jobsets = [o for o in render_all(profile, workloads) if o["kind"] == "JobSet"]
    tpu_sets = [ps for stage, js in zip(workloads, jobsets, strict=True)
                for ps in pod_sets(stage, js) if ps.requests.get("google.com/tpu")]
    assert tpu_sets and all(ps.node_selector[TEAM_LABEL] == "research" for ps in tpu_sets)
    [group] = queue["spec"]["resourceGroups"]
    assert [f["name"] for f in group["flavors"]][:2] == ["tpuv6e-flavor", "tpuv6e-od-flavor"]
    for ps in tpu_sets:
        assert assigned_flavor(ps, group, flavors, cohort=True) == "tpuv6e-flavor"
    # the reservation's quota gone: not admitted at all, never on product's mode
    for flavor in group["flavors"]:
        for resource in flavor["resources"]:
            if flavor["name"] == "tpuv6e-flavor" and resource["name"] == "google.com/tpu":
                resource["nominalQuota"], resource["borrowingLimit"] = 0, 0
    problems = admission_problems(tpu_sets, queue, flavors)
    assert problems and all("flavor tpuv6e-od-flavor doesn't match node affinity" in p
                            for p in problems)


def test_the_plans_pool_lines_name_each_teams_own_pools(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What `tpurl plan` says the infra stage makes is what the blueprint holds: the team's
    own pool names (a plan naming the old `gke-tpu-v6e-pool` sends an operator looking for a
    pool the deploy never creates)."""
    from flows.backends.gke.infra.infra_stage import gke_plan_actions

    for profile, load in ((TUTORIAL, tutorial_profile), (SMOKE, smoke_profile)):
        s = settings_with_teams(tmp_path, monkeypatch, TWO_TEAMS, profile)
        said = " ".join(a for a in gke_plan_actions(load()) if a.startswith("TPU pool"))
        names = [p.name for p in tpu_pools(s.gke, s.team)]
        assert s.team and names and all(f"{name} (" in said for name in names), said
        assert "gke-tpu-v6e-pool" not in said
