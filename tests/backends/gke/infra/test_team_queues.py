"""Fair queues for teams (deployments/teams.yaml): each team's quota, its Kueue ClusterQueue
in the cluster's cohort, LocalQueue and priority classes, as the blueprint stages them and
Kueue v0.17.1's CRD schemas accept them (tests/support/kueue_schema.py); the JobSets of a
team's run carry its queue and a priority by who started it; pre-flight looks for the
team's queues. A profile in no team keeps ``gke.kueue_queue`` and no priority class."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from flows.backends.gke.backend import GkeBackend
from flows.backends.gke.infra.admission import admission_problems, pod_sets
from flows.backends.gke.infra.cloud import RestGoogleApis
from flows.backends.gke.infra.kueue_config import planned_kueue
from flows.backends.gke.infra.kueue_objects import kueue_configuration_text
from flows.backends.gke.infra.preflight.access import check_kueue_admission
from flows.backends.gke.infra.preflight.team_queues import (
    FAIR_SHARING_FIX,
    KUEUE_MANAGER_CONFIG,
    KUEUE_MANAGER_CONFIG_KEY,
    KUEUE_SYSTEM,
    check_team_queues,
    fair_sharing_on,
)
from flows.backends.gke.infra.settings import settings_from_profile
from flows.backends.gke.infra.team_quota import TeamQuota, checked_quotas, team_quotas
from flows.backends.gke.jobs.manifests import render_all
from flows.backends.gke.jobs.naming import secret_name
from flows.backends.gke.jobs.options import options_for
from flows.backends.gke.team_queues import INTERACTIVE, PRIORITY_LABEL, SCHEDULED
from flows.config.errors import ProfileError
from flows.config.teams import Teams, load_teams
from flows.core.team_origin import TeamAndOrigin
from flows.operations.plan import planned_workloads
from tests.backends.gke.infra.test_kueue_objects_version import CLUSTER, Routed
from tests.fakes.kube_api import FakeApiServer, FakeKube
from tests.support.kueue_schema import kueue_errors
from tests.support.profiles import SMOKE, TUTORIAL, tutorial_profile

QUEUE = "kueue.x-k8s.io/queue-name"
TWO_TEAMS = (f"teams:\n"
             f"  research: {{usd_per_month: 900, profiles: [{TUTORIAL}], fair_weight: 2}}\n"
             f"  product: {{usd_per_month: 500, profiles: [{SMOKE}], tpu_chips: 8, "
             f"borrowing_limit_chips: 8}}\n")


def _teams(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "teams.yaml"
    path.write_text(text)
    return path


def _refused(tmp_path: Path, text: str) -> list[tuple[str, str, str]]:
    with pytest.raises(ProfileError) as exc:
        load_teams(_teams(tmp_path, text))
    return [(i.field, i.problem, i.fix) for i in exc.value.issues]


@pytest.mark.parametrize(("field", "value", "fix"), [
    ("tpu_chips", "0", "a whole number above 0"),
    ("borrowing_limit_chips", "-1", "(0: none)"),
    ("fair_weight", "0", "a number above 0"),
])
def test_a_bad_quota_field_is_refused_naming_it(tmp_path: Path, field: str, value: str,
                                                fix: str) -> None:
    [(where, _, how)] = _refused(tmp_path, f"teams:\n  a: {{usd_per_month: 5, profiles: "
                                           f"[rehearsal], {field}: {value}}}\n")
    assert where == f"teams.a.{field}" and fix in how


def _file_teams(tmp_path: Path, body: str) -> Teams:
    return load_teams(_teams(tmp_path, "teams:\n" + body))


def test_unset_chips_split_evenly_what_the_set_ones_leave(tmp_path: Path) -> None:
    teams = _file_teams(tmp_path, (
        "  a: {usd_per_month: 5, profiles: [rehearsal], tpu_chips: 4}\n"
        f"  b: {{usd_per_month: 5, profiles: [{SMOKE}]}}\n"
        f"  c: {{usd_per_month: 5, profiles: [{TUTORIAL}], borrowing_limit_chips: 0}}\n"))
    quotas = team_quotas(teams, 33)
    assert quotas["a"] == TeamQuota("a", 4, 29, 1.0)
    assert (quotas["b"].nominal, quotas["c"].nominal) == (15, 14)  # the odd chip to the first
    assert quotas["b"].borrowing_limit == 33 - 15 and quotas["c"].most == 14
    assert sum(q.nominal for q in quotas.values()) == 33


def test_quotas_the_cluster_cannot_hold_are_refused_with_the_field(tmp_path: Path) -> None:
    teams = _file_teams(tmp_path, (
        "  a: {usd_per_month: 5, profiles: [rehearsal], tpu_chips: 24}\n"
        f"  b: {{usd_per_month: 5, profiles: [{SMOKE}], tpu_chips: 16}}\n"))
    with pytest.raises(ProfileError) as exc:
        checked_quotas(teams, 32, {})
    [issue] = exc.value.issues
    assert "given 40 chips, the cluster has 32" in issue.problem
    assert "at most 32" in issue.fix


def test_a_run_above_its_teams_reach_is_refused_naming_the_borrowing_limit(
        tmp_path: Path) -> None:
    teams = _file_teams(tmp_path, (
        f"  a: {{usd_per_month: 5, profiles: [{TUTORIAL}], tpu_chips: 16, "
        "borrowing_limit_chips: 8}\n"
        f"  b: {{usd_per_month: 5, profiles: [{SMOKE}]}}\n"))
    with pytest.raises(ProfileError) as exc:
        checked_quotas(teams, 32, {TUTORIAL: 32})
    [issue] = exc.value.issues
    assert issue.field == "teams.a.borrowing_limit_chips"
    assert "needs 32 chips" in issue.problem and "at most 24" in issue.problem
    assert "at least 16" in issue.fix


def test_the_infra_settings_refuse_a_run_its_team_could_never_hold(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TPURL_TEAMS_FILE", str(_teams(tmp_path, (
        f"teams:\n  a: {{usd_per_month: 5, profiles: [{TUTORIAL}], borrowing_limit_chips: 0}}\n"
        f"  b: {{usd_per_month: 5, profiles: [{SMOKE}]}}\n"))))
    with pytest.raises(ProfileError) as exc:
        settings_from_profile(tutorial_profile(), cache_dir=tmp_path)
    [issue] = exc.value.issues
    assert issue.field == "teams.a.borrowing_limit_chips" and "never admit" in issue.problem


def _staged(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[dict]:
    monkeypatch.setenv("TPURL_TEAMS_FILE", str(_teams(tmp_path, TWO_TEAMS)))
    gke = tutorial_profile().gke
    assert gke is not None
    text = kueue_configuration_text(gke).replace("${tpu_quota}", str(gke.total_chips)) \
        .replace("${accelerator_type}", "tpu-v6e-slice").replace("${namespace}", "default")
    return [d for d in yaml.safe_load_all(text) if d]


def test_two_teams_queues_pass_kueues_crd_schemas(monkeypatch: pytest.MonkeyPatch,
                                                   tmp_path: Path) -> None:
    docs = _staged(monkeypatch, tmp_path)
    kueue = [d for d in docs if d["kind"] in ("ClusterQueue", "LocalQueue",
                                              "WorkloadPriorityClass")]
    assert {(d["kind"], d["metadata"]["name"]) for d in kueue} >= {
        ("ClusterQueue", "team-research"), ("ClusterQueue", "team-product"),
        ("LocalQueue", "team-research"), ("LocalQueue", "team-product"),
        ("WorkloadPriorityClass", INTERACTIVE), ("WorkloadPriorityClass", SCHEDULED)}
    for doc in kueue:
        assert kueue_errors(doc) == [], doc["metadata"]["name"]
    # v1beta1's field name, as v1beta2's strict schema refuses it
    cq = next(d for d in kueue if d["metadata"]["name"] == "team-product")
    wrong = {**cq, "spec": {**cq["spec"], "cohort": cq["spec"]["cohortName"]}}
    assert any("'cohort' was unexpected" in e for e in kueue_errors(wrong))


def test_each_team_queue_is_in_the_clusters_cohort_with_its_chips(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    docs = _staged(monkeypatch, tmp_path)
    gke = tutorial_profile().gke
    assert gke is not None
    cqs = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ClusterQueue"}
    profile_cq = cqs.pop("cluster-queue")  # for profiles in no team, outside the cohort
    assert "cohortName" not in profile_cq["spec"]
    tpu = {name: [(f["name"], r) for g in cq["spec"]["resourceGroups"] for f in g["flavors"]
                  for r in f["resources"] if r["name"] == "google.com/tpu"]
           for name, cq in cqs.items()}
    research, product = tpu["team-research"], tpu["team-product"]
    tpu_flavors = [name for name, r in research if r["nominalQuota"]]
    assert tpu_flavors and len(tpu_flavors) == len(gke.capacity_chain)
    assert {r["nominalQuota"] for _, r in product if r["nominalQuota"]} == {8}
    assert {r["borrowingLimit"] for _, r in product if r["nominalQuota"]} == {8}
    assert {r["nominalQuota"] for _, r in research if r["nominalQuota"]} == {
        gke.total_chips - 8}
    for cq in cqs.values():
        assert cq["spec"]["cohortName"] == gke.cluster
        assert cq["spec"]["preemption"] == {"reclaimWithinCohort": "Any",
                                            "withinClusterQueue": "LowerPriority"}
    assert cqs["team-research"]["spec"]["fairSharing"] == {"weight": "2"}
    # the CPU pool's quota is split, so the cohort holds what the one ClusterQueue held
    cpu = [sum(int(r["nominalQuota"]) for g in cq["spec"]["resourceGroups"]
               for f in g["flavors"] if f["name"] == "cpu-np-flavor"
               for r in f["resources"] if r["name"] == "cpu") for cq in cqs.values()]
    assert sum(cpu) == 6400


def test_a_teams_jobsets_carry_its_queue_and_priority(monkeypatch: pytest.MonkeyPatch,
                                                      tmp_path: Path) -> None:
    profile = tutorial_profile()
    alone = [o for o in render_all(profile, planned_workloads(profile)) if o["kind"] == "JobSet"]
    assert {o["metadata"]["labels"][QUEUE] for o in alone} == {"user-queue"}
    assert not any(PRIORITY_LABEL in o["metadata"]["labels"] for o in alone)
    monkeypatch.setenv("TPURL_TEAMS_FILE", str(_teams(tmp_path, TWO_TEAMS)))
    jobsets = [o for o in render_all(profile, planned_workloads(profile))
               if o["kind"] == "JobSet"]
    assert {(o["metadata"]["labels"][QUEUE], o["metadata"]["labels"][PRIORITY_LABEL])
            for o in jobsets} == {("team-research", INTERACTIVE)}
    # a deployment's run: its flow's prepare decided the origin, the renderer asks no one
    # (Prefect's runtime would read a deployment id from this variable)
    monkeypatch.setenv("PREFECT__RUNTIME__DEPLOYMENT__ID", "00000000-0000-0000-0000-0000000000aa")
    research = load_teams().named("research")
    by_deployment = options_for(profile, TeamAndOrigin(research, "deployment"))
    scheduled = [o for o in render_all(profile, planned_workloads(profile), by_deployment)
                 if o["kind"] == "JobSet"]
    assert {o["metadata"]["labels"][PRIORITY_LABEL] for o in scheduled} == {SCHEDULED}
    in_process = [o for o in render_all(profile, planned_workloads(profile))
                  if o["kind"] == "JobSet"]
    assert {o["metadata"]["labels"][PRIORITY_LABEL] for o in in_process} == {INTERACTIVE}


def test_a_runs_backend_renders_with_its_team_and_origin_whatever_the_file_says_later(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The team and origin prepare decided are the ones every JobSet and Secret of the run
    carries: the teams file is not read again while the manifests render (here it is
    removed, then names the profile in the other team) and Prefect is not asked."""
    monkeypatch.setenv("TPURL_TEAMS_FILE", str(_teams(tmp_path, TWO_TEAMS)))
    profile = tutorial_profile()
    decided = TeamAndOrigin(load_teams().named("research"), "deployment")
    backend = GkeBackend(profile, stage="train", team_origin=decided)
    workloads = planned_workloads(profile)
    (tmp_path / "teams.yaml").unlink()
    gone = render_all(profile, workloads, backend.options)
    _teams(tmp_path, TWO_TEAMS.replace(f"[{TUTORIAL}]", "[other]").replace(
        f"[{SMOKE}]", f"[{SMOKE}, {TUTORIAL}]"))
    moved = render_all(profile, workloads, backend.options)
    for objects in (gone, moved):
        jobsets = [o for o in objects if o["kind"] == "JobSet"]
        assert {(o["metadata"]["labels"][QUEUE], o["metadata"]["labels"][PRIORITY_LABEL])
                for o in jobsets} == {("team-research", SCHEDULED)}
        secrets = [o for o in objects if o["kind"] == "Secret"]
        assert secrets and all(o["metadata"]["name"] == secret_name("team:research", src)
                               for o in secrets
                               for src in [o["metadata"]["annotations"]["tpurl/value-source"]])
    # a run of no team decided so keeps the profile's queue and its own Secrets
    alone = GkeBackend(profile, stage="train", team_origin=TeamAndOrigin(None, "deployment"))
    assert alone.options.queue_labels == {QUEUE: profile.gke.kueue_queue}
    assert alone.options.secret_owner == f"profile:{TUTORIAL}"


def test_preflight_before_the_deploy_admits_every_pod_through_the_teams_queue(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TPURL_TEAMS_FILE", str(_teams(tmp_path, TWO_TEAMS)))
    profile = tutorial_profile()
    s = settings_from_profile(profile, cache_dir=tmp_path)
    assert s.queue == "team-research"
    kueue = planned_kueue(s)
    assert kueue["local_queue"]["metadata"]["name"] == "team-research"
    assert kueue["cluster_queue"]["metadata"]["name"] == "team-research"
    workloads = planned_workloads(profile)
    jobsets = [o for o in render_all(profile, workloads) if o["kind"] == "JobSet"]
    sets = [ps for stage, js in zip(workloads, jobsets, strict=True)
            for ps in pod_sets(stage, js)]
    # the cluster holds both teams' slices (32 + 8 chips: cluster_shape.py); research's
    # even part, 32 of the 40 product leaves, holds the 32-chip run
    assert admission_problems(sets, kueue["cluster_queue"], kueue["flavors"]) == []
    # 24 chips of its own and no borrowing never hold it, in Kueue's words
    no_borrowing = yaml.safe_load(yaml.safe_dump(kueue["cluster_queue"]))
    for group in no_borrowing["spec"]["resourceGroups"]:
        for flavor in group["flavors"]:
            for resource in flavor["resources"]:
                if "borrowingLimit" in resource:
                    resource["borrowingLimit"] = 0
                    resource["nominalQuota"] = 24
    [first, *_] = admission_problems(sets, no_borrowing, kueue["flavors"])
    assert "insufficient quota for google.com/tpu" in first and "(24)" in first


def test_preflight_fails_when_the_cluster_lacks_the_teams_queue(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TPURL_TEAMS_FILE", str(_teams(tmp_path, TWO_TEAMS)))
    s = settings_from_profile(tutorial_profile(), cache_dir=tmp_path)
    status, _found, fix, target = check_kueue_admission(
        s, None, {"local_queue": None, "cluster_queue": None, "flavors": {}})  # type: ignore[arg-type]
    assert status == "fail" and "team-research" in target
    assert "deployments/teams.yaml" in fix


def _cluster_holding(s, rendered: dict) -> FakeKube:
    """A fake cluster holding the team's LocalQueue and ClusterQueue as the blueprint
    rendered them."""
    kube = FakeKube()
    kube.create("localqueues", s.gke.namespace, rendered["local_queue"])
    kube.create("clusterqueues", "", rendered["cluster_queue"])
    return kube


def test_preflight_reads_the_teams_queues_and_compares_them_with_the_file(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The real RestGoogleApis.kueue_objects against the fake Kubernetes API holding the
    queues the blueprint rendered: as rendered, ok; a teams file changed since (the team's
    chips), a warning naming the flavor; gone, a failure."""
    monkeypatch.setenv("TPURL_TEAMS_FILE", str(_teams(tmp_path, TWO_TEAMS)))
    s = settings_from_profile(tutorial_profile(), cache_dir=tmp_path)
    rendered = planned_kueue(s)
    kube = _cluster_holding(s, rendered)
    for flavor in rendered["flavors"].values():
        kube.create("resourceflavors", "", flavor)
    kube.create("configmaps", KUEUE_SYSTEM, _manager_config(FAIR_V1BETA2))
    with FakeApiServer(kube) as server:
        apis = RestGoogleApis(Routed(server.url))
        live = apis.kueue_objects(CLUSTER, s.gke.namespace, s.queue)
        assert check_team_queues("team-research", live, rendered)[:2] == (
            "ok", "as the teams file renders them")
        monkeypatch.setenv("TPURL_TEAMS_FILE", str(_teams(tmp_path, TWO_TEAMS.replace(
            "tpu_chips: 8", "tpu_chips: 16"))))
        status, found, fix, _ = check_team_queues("team-research", live, planned_kueue(s))
        assert status == "warn" and "32 chips + borrowing 8, the file gives 24 + 16" in found
        assert "re-apply the blueprint" in fix
        kube.delete("clusterqueues", "", "team-research")
        live = apis.kueue_objects(CLUSTER, s.gke.namespace, s.queue)
        assert check_team_queues("team-research", live, rendered)[0] == "fail"


# Kueue v0.17.1's configuration as its manifests ship it (config/components/manager
# controller_manager_config.yaml), with the fair-sharing section on or left out
FAIR_V1BETA2 = ("apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\n"
                "fairSharing:\n  preemptionStrategies: [LessThanOrEqualToFinalShare, "
                "LessThanInitialShare]\n")
NO_FAIR = "apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\nwebhook:\n  port: 9443\n"


def _manager_config(text: str) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": KUEUE_MANAGER_CONFIG, "namespace": KUEUE_SYSTEM},
            "data": {KUEUE_MANAGER_CONFIG_KEY: text}}


@pytest.mark.parametrize(("text", "on"), [
    (FAIR_V1BETA2, True), (NO_FAIR, False), (None, None), ("{not yaml", None),
    ("apiVersion: config.kueue.x-k8s.io/v1beta1\nfairSharing:\n  enable: true\n", True),
    ("apiVersion: config.kueue.x-k8s.io/v1beta1\nfairSharing:\n  preemptionStrategies: []\n",
     False),
    ("apiVersion: config.kueue.x-k8s.io/v1beta2\nfairSharing:\n  enable: false\n", False)])
def test_fair_sharing_is_read_from_kueues_own_configuration(text: str | None,
                                                            on: bool | None) -> None:
    assert fair_sharing_on(text) is on


def test_a_cluster_without_fair_sharing_is_warned_with_the_deploy_that_sets_it(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Through the real RestGoogleApis: Kueue's configuration as the chart ships it (no
    fairSharing: a cluster deployed before the deploy set it) makes the teams' weights order
    nothing; the warning gives the deploy that sets it. Not
    readable, the line says so and judges nothing."""
    monkeypatch.setenv("TPURL_TEAMS_FILE", str(_teams(tmp_path, TWO_TEAMS)))
    s = settings_from_profile(tutorial_profile(), cache_dir=tmp_path)
    rendered = planned_kueue(s)
    kube = _cluster_holding(s, rendered)
    with FakeApiServer(kube) as server:
        apis = RestGoogleApis(Routed(server.url))
        status, found, _fix, _ = check_team_queues(
            "team-research", apis.kueue_objects(CLUSTER, s.gke.namespace, s.queue), rendered)
        assert status == "ok" and "fair sharing unknown" in found
        kube.create("configmaps", KUEUE_SYSTEM, _manager_config(NO_FAIR))
        status, found, fix, _ = check_team_queues(
            "team-research", apis.kueue_objects(CLUSTER, s.gke.namespace, s.queue), rendered)
    assert status == "warn" and "weights order nothing" in found
    # the fix is the deploy, which sets fair sharing in Kueue's chart values (decision 0041)
    assert fix == FAIR_SHARING_FIX and "`tpurl run PROFILE`" in fix
