"""One cluster, several teams' profiles (flows/backends/gke/infra/cluster_shape.py): the
cluster's chips, Kueue flavors and every team's quota are the union of the teams file's
profiles on it, so whichever team's profile deploys stages the same Kueue objects, and the
team-budgets how-to's own two-team example fits the cluster it describes."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flows.backends.gke.infra.blueprint import edit_context
from flows.backends.gke.infra.cluster_shape import Member, shape_of
from flows.backends.gke.infra.settings import InfraSettings, settings_from_profile
from flows.common.paths import REPO_ROOT
from flows.config import load_profile
from flows.config.teams import load_teams
from tests.support.profiles import SMOKE, SMOKE_REQUIRED, TUTORIAL, settings_with_teams, tutorial_profile

LLAMA = "llama3.1-8b-v6e-16"
HOW_TO = REPO_ROOT / "docs" / "how-to" / "team-budgets.md"
THREE_TEAMS = (f"teams:\n"
               f"  research: {{usd_per_month: 900, profiles: [{TUTORIAL}]}}\n"
               f"  product: {{usd_per_month: 500, profiles: [{SMOKE}]}}\n"
               f"  ads: {{usd_per_month: 500, profiles: [{LLAMA}]}}\n")


def how_to_teams() -> str:
    """The how-to's two-team example, as its page shows it (section "Fair queues on one
    cluster")."""
    section = HOW_TO.read_text().split("## Fair queues on one cluster", 1)[1]
    found = re.search(r"```yaml\n(teams:\n.*?)```", section, re.S)
    assert found, "the how-to's fair-queue example is a ```yaml block starting with teams:"
    return found.group(1)


def _cluster_queues(s: InfraSettings) -> dict[str, Any]:
    """The team ClusterQueues the deploy of ``s`` stages for the cluster, by name."""
    [(_, text)] = edit_context(s.gke, s.shape).staged
    return {d["metadata"]["name"]: d for d in yaml.safe_load_all(text)
            if d and d["kind"] == "ClusterQueue" and d["metadata"]["name"].startswith("team-")}


def _tpu(cq: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    return [(f["name"], r["nominalQuota"], r.get("borrowingLimit"))
            for g in cq["spec"]["resourceGroups"] for f in g["flavors"]
            for r in f["resources"] if r["name"] == "google.com/tpu"]


def test_the_how_tos_two_team_example_fits_the_cluster_of_both_teams(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each profile's deploy used to check the file against its own slice: the smoke
    profile's 8 chips refused research's 24 ("the teams are given 24 chips, the cluster has
    8"). The cluster holds both slices: 32 + 8 chips."""
    for profile in (SMOKE, TUTORIAL):
        s = settings_with_teams(tmp_path, monkeypatch, how_to_teams(), profile)
        assert s.shape is not None and s.shape.chips == 40
        queues = _cluster_queues(s)
        assert {f: (n, b) for f, n, b in _tpu(queues["team-research"]) if n} == {
            "tpuv6e-flavor": (24, 8), "tpuv6e-od-flavor": (24, 8)}
        assert {n for _, n, _ in _tpu(queues["team-product"]) if n} == {16}


def test_deploying_team_bs_profile_stages_team_as_quota_and_flavors_unchanged(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The attack: team B's deploy re-stages the cluster's Kueue configuration. Before, it
    split B's own 8 chips (research's quota went from 16 to 4) and dropped the reservation
    flavor research's runs are admitted on."""
    teams = THREE_TEAMS.replace(f"  ads: {{usd_per_month: 500, profiles: [{LLAMA}]}}\n", "")
    a = _cluster_queues(settings_with_teams(tmp_path, monkeypatch, teams, TUTORIAL))
    b = _cluster_queues(settings_with_teams(tmp_path, monkeypatch, teams, SMOKE))
    assert a == b
    assert _tpu(b["team-research"])[0] == ("tpuv6e-flavor", 20, 20)


@cache
def _staged_by(profile: str, tmp: str) -> str:
    """What a deploy of ``profile`` stages for the three teams' cluster (rendered once)."""
    mp = pytest.MonkeyPatch()
    try:
        s = settings_with_teams(Path(tmp), mp, THREE_TEAMS, profile) if profile != LLAMA else \
            _llama_settings(Path(tmp), mp)
        [(_, text)] = edit_context(s.gke, s.shape).staged
        return text
    finally:
        mp.undo()


def _llama_settings(tmp: Path, mp: pytest.MonkeyPatch) -> InfraSettings:
    path = tmp / "teams.yaml"
    path.write_text(THREE_TEAMS)
    mp.setenv("TPURL_TEAMS_FILE", str(path))
    return settings_from_profile(load_profile(LLAMA, SMOKE_REQUIRED, environ={}),
                                 cache_dir=tmp / "cache")


@pytest.fixture(scope="module")
def staged_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("three-teams"))


@settings(max_examples=12, deadline=None, suppress_health_check=[
    HealthCheck.function_scoped_fixture])
@given(order=st.lists(st.sampled_from([TUTORIAL, SMOKE, LLAMA]), min_size=1, max_size=5))
def test_any_order_of_three_teams_deploys_gives_one_cluster_shape(
        staged_dir: str, order: list[str]) -> None:
    """Deploys of three teams' profiles in any order and any number: after each, the
    cluster's Kueue configuration (what the last deploy applied) is the same, so no deploy
    replaces another team's quota or flavors, and the last one decides nothing."""
    applied = [_staged_by(profile, staged_dir) for profile in order]
    assert len(set(applied)) == 1
    queues = {d["metadata"]["name"]: d for d in yaml.safe_load_all(applied[-1])
              if d and d["kind"] == "ClusterQueue"}
    assert {"team-research", "team-product", "team-ads"} <= set(queues)
    # 32 + 8 + 16 chips, split evenly with the remainder to the first team
    assert [_tpu(queues[f"team-{t}"])[0][1] for t in ("research", "product", "ads")] == \
        [19, 19, 18]
    flavors = [f["name"] for f in queues["team-ads"]["spec"]["resourceGroups"][0]["flavors"]]
    assert flavors == ["tpuv6e-flavor", "tpuv6e-od-flavor", "cpu-np-flavor"]


def test_one_slice_counts_once_per_team_whose_pools_hold_it() -> None:
    """Two profiles of one team and one slice share its pools; two teams' pools are each
    their own (capacity_pools.team_pool_name), so each team's slice counts."""
    a = tutorial_profile().gke
    assert a is not None
    one_team = shape_of("c", [Member(TUTORIAL, "a", a), Member("copy", "a", a)])
    assert one_team.chips == 32 and one_team.capacity_chain == ("reservation",)
    two_teams = shape_of("c", [Member(TUTORIAL, "a", a), Member("copy", "b", a)])
    assert two_teams.chips == 64
    assert two_teams.quotas(load_teams(Path("/nonexistent"))) == {}


def test_plan_shows_the_clusters_shape_each_teams_quota_and_the_pool_two_slices_want(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from flows.backends.gke.infra.cluster_shape import shape_lines

    s = settings_with_teams(tmp_path, monkeypatch, how_to_teams(), SMOKE)
    assert s.shape is not None
    lines = shape_lines(s.shape, load_teams())
    assert lines[0].startswith("Cluster tpurl-v6e, as the teams file's profiles on it")
    [research] = [line for line in lines if line.startswith(f"  {TUTORIAL} (team research)")]
    assert re.fullmatch(rf"  {TUTORIAL} \(team research\): 32 chips, 1 x 4x8 "
                        r"ct6e-standard-4t, reservation; pools tpu-research-v6e-res-b-[0-9a-f]{5}",
                        research), research
    assert "  TPU chips: 40; Kueue TPU flavors: tpuv6e-flavor, tpuv6e-od-flavor" in lines
    assert "  team research: 24 chips guaranteed, may borrow 8, fair-sharing weight 2" in lines
    assert "  team product: 16 chips guaranteed, may borrow 24, fair-sharing weight 1" in lines
    assert not [line for line in lines if "conflict" in line]  # each team's pools its own
    # fair sharing is the deploy's own: the chart values it installs Kueue with carry it
    assert any(line.startswith("  fair sharing: set by the deploy") and
               "deployments/blueprints/kueue-helm-values.yaml" in line for line in lines)
    assert any("the next deploy DELETES those" in line for line in lines)


def _live_pool(name: str, topology: str, reservation: bool) -> dict[str, Any]:
    """A TPU pool as the GKE API reports it (container v1 NodePool)."""
    affinity = {"consumeReservationType": "SPECIFIC_RESERVATION",
                "values": ["projects/p/reservations/r"]} if reservation else \
        {"consumeReservationType": "NO_RESERVATION"}
    return {"name": name, "config": {"machineType": "ct6e-standard-4t",
                                     "reservationAffinity": affinity},
            "placementPolicy": {"type": "COMPACT", "tpuTopology": topology}}


def test_a_profile_may_replace_its_own_pool_never_another_profiles() -> None:
    from flows.backends.gke.infra.pool_owners import pools_of_others_at_risk
    from tests.support.profiles import infra_profile, with_gke

    s = settings_from_profile(infra_profile(), cache_dir=Path("/nonexistent"))
    own_next_mode = with_gke(s, capacity="on-demand", reservation=None)
    cluster = {"nodePools": [_live_pool("gke-tpu-v6e-pool", "4x8", True),
                             {"name": "cpu-np", "config": {"machineType": "n4-standard-64"}}]}
    # its own pool (recorded as its own, or recorded before profiles were): replaced, as before
    for record in (None, {"tpu_pools": ["gke-tpu-v6e-pool"]},
                   {"pools_by_profile": {TUTORIAL: ["gke-tpu-v6e-pool"]}}):
        assert pools_of_others_at_risk(cluster, own_next_mode, record) == []
    # the same pool recorded as another profile's: refused, whatever it would become
    theirs = {"pools_by_profile": {SMOKE: ["gke-tpu-v6e-pool"]}}
    assert pools_of_others_at_risk(cluster, own_next_mode, theirs) == [
        ("gke-tpu-v6e-pool", SMOKE, "replaced: capacity reservation becomes on-demand")]
    # unchanged by the deploy (same slice, same mode): nothing at risk, whoever made it
    assert pools_of_others_at_risk(cluster, s, theirs) == []
    # a pool the blueprint does not build at all is deleted
    other = {"nodePools": [_live_pool("gke-tpu-v6e-spot-c", "4x8", False)]}
    assert pools_of_others_at_risk(other, s, {"pools_by_profile": {SMOKE: [
        "gke-tpu-v6e-spot-c"]}})[0][2].startswith("deleted")


def test_the_how_tos_plan_output_is_what_the_plan_prints(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The how-to's printed cluster ("One cluster, several teams") is the plan's own output
    for its two-team example, line by line (a line cut with "..." by its start)."""
    from flows.backends.gke.infra.cluster_shape import shape_lines

    section = HOW_TO.read_text().split("## One cluster, several teams", 1)[1]
    found = re.search(r"```text\n(.*?)```", section, re.S)
    assert found
    s = settings_with_teams(tmp_path, monkeypatch, how_to_teams(), SMOKE)
    assert s.shape is not None
    printed = shape_lines(s.shape, load_teams())
    shown = found.group(1).splitlines()
    assert len(shown) == len(printed)
    for doc_line, line in zip(shown, printed, strict=True):
        head = doc_line.split("...", 1)[0].rstrip("( ")
        assert line.startswith(head), (doc_line, line)
