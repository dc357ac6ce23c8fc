"""Two teams on one cluster: each team's pods act as that team's identity only, which may
write its own bucket and no other (flows/backends/gke/team_identity.py, decision 0027).

The attack: team A's reward functions run in the training program; whatever Google identity
that program's pod acts as (GKE's rules, tests/fakes/cloud/pod_identity.py) must not be able
to write team B's bucket under the bindings both teams' infra stages grant
(flows/backends/gke/infra/iam.py ``desired_bindings``). Before, every team pod was on the
host's network, acting as the node account, which held objectAdmin on both buckets.
"""

from __future__ import annotations

import pytest

from flows.backends.gke.infra import iam
from flows.backends.gke.infra.infra_stage import gke_plan_notes
from flows.backends.gke.infra.settings import settings_from_profile
from flows.backends.gke.jobs.common import WORKLOAD_CONTAINER
from flows.backends.gke.jobs.manifests import render_all
from flows.backends.gke.runtime import GkeRuntime
from flows.backends.gke.team_identity import (
    Member,
    cluster_grants,
    node_account,
    shared_bucket_issues,
)
from flows.config.profile import Profile
from flows.core.planned_programs import planned_workloads
from tests.fakes.cloud.pod_identity import acting_member, may_write, pods
from tests.support.profiles import (
    SMOKE,
    SMOKE_REQUIRED,
    TUTORIAL,
    smoke_profile,
    tutorial_profile,
)

NUMBER = "123456789012"
A_BUCKET, B_BUCKET = "team-a-ckpts", "team-b-ckpts"


def _profiles() -> tuple[Profile, Profile]:
    a = tutorial_profile(**{"gke.bucket": A_BUCKET})
    b = smoke_profile(**{"gke.bucket": B_BUCKET})
    assert (a.gke and b.gke and a.gke.cluster == b.gke.cluster
            and a.gke.project == b.gke.project)  # one cluster
    return a, b


def _granted(*profiles: Profile) -> list[tuple[str, str, str]]:
    """Every binding the profiles' infra stages grant, as (resource, member, role)."""
    out = []
    for profile in profiles:
        s = settings_from_profile(profile).model_copy(update={"project_number": NUMBER})
        out += [(f"{b.scope} {b.resource}", b.member, b.role) for b in iam.desired_bindings(s)]
    return out


def _team_pods(profile: Profile) -> list[dict]:
    """The pods of the profile's JobSets that run the team's code (its image's program)."""
    jobsets = [o for o in render_all(profile, planned_workloads(profile, GkeRuntime(profile)))
               if o["kind"] == "JobSet"]
    return [pod for js in jobsets for pod in pods(js)
            if any(c["name"] == WORKLOAD_CONTAINER for c in pod["containers"])]


def test_team_a_code_cannot_write_team_b_bucket(two_teams: None) -> None:
    """Every pod that runs team A's code (the Pathways head with its reward functions,
    conversion, export) may write A's bucket and not B's."""
    a, b = _profiles()
    bindings = _granted(a, b)
    assert a.gke is not None
    team_pods = _team_pods(a)
    assert len(team_pods) >= 3
    for pod in team_pods:
        member = acting_member(pod, node_account=a.gke.node_service_account,
                               project=a.gke.project, namespace=a.gke.namespace,
                               project_number=NUMBER)
        assert not may_write(member, B_BUCKET, bindings), (member, pod.get("hostNetwork"))
        assert may_write(member, A_BUCKET, bindings), member


def test_each_team_runs_as_its_own_account(two_teams: None) -> None:
    a, b = _profiles()
    accounts = {p.name: {pod.get("serviceAccountName") for pod in _team_pods(p)}
                for p in (a, b)}
    assert accounts == {TUTORIAL: {"tpurl-team-team-a"}, SMOKE: {"tpurl-team-team-b"}}
    for profile in (a, b):
        for pod in _team_pods(profile):
            assert not pod.get("hostNetwork")
            assert not any((c.get("securityContext") or {}).get("privileged")
                           for c in [*pod.get("initContainers", []), *pod["containers"]])


def test_two_teams_grants_are_disjoint(two_teams: None) -> None:
    """The teams' members differ and each holds its own bucket only, node accounts
    included: each team's TPU nodes run as its own (decision 0036)."""
    a, b = _profiles()
    bindings = _granted(a, b)
    holders: dict[str, set[str]] = {}
    for resource, member, _role in bindings:
        holders.setdefault(member, set()).add(resource)
    assert len(holders) == 4  # two pod principals, two node accounts
    assert sorted(holders.values(), key=sorted) == [
        {f"bucket {A_BUCKET}"}, {f"bucket {A_BUCKET}"}, {f"bucket {B_BUCKET}"},
        {f"bucket {B_BUCKET}"}]
    assert a.gke is not None
    assert f"serviceAccount:{a.gke.node_service_account}" not in holders
    grants = cluster_grants([Member(TUTORIAL, "team-a", "p", "default", A_BUCKET),
                             Member(SMOKE, "team-b", "p", "default", B_BUCKET)])
    assert not set(grants[0].buckets) & set(grants[1].buckets)
    assert grants[0].member != grants[1].member
    assert shared_bucket_issues(grants) == []


def test_a_bucket_two_teams_write_is_named() -> None:
    grants = cluster_grants([Member("x", "team-a", "p", "default", "shared"),
                             Member("y", "team-b", "p", "default", "shared"),
                             Member("z", None, "p", "default", "own")])
    (issue,) = shared_bucket_issues(grants)
    assert issue.field == "gke.bucket" and "team-a, team-b" in issue.problem
    assert [g.account for g in grants] == ["tpurl-team-team-a", "tpurl-team-team-b", "default"]


def test_plan_shows_the_grants_per_team(two_teams: None) -> None:
    """The plan of A's profile names each team's account, principal and bucket (B's profile
    loads with the defaults the tests give, so its bucket is read too), then the workers'."""
    a, _ = _profiles()
    notes = [n for n in gke_plan_notes(a) if n.startswith("identity:")]
    assert notes[0].startswith("identity: team team-a: pods run as Kubernetes service "
                               "account tpurl-team-team-a (principal://")
    assert f"on gs://{A_BUCKET} only" in notes[0]
    assert notes[1].startswith("identity: team team-b: pods run as Kubernetes service "
                               "account tpurl-team-team-b (principal://")
    assert f"gs://{A_BUCKET}" not in notes[1]
    node_lines = [n for n in notes if "Pathways workers" in n]
    assert [n.split(":")[1].strip() for n in node_lines] == ["team team-a", "team team-b"]
    assert f"gs://{A_BUCKET} only" in node_lines[0] and "team-b" not in node_lines[0]
    accounts = {n.split(" run as ")[1].split(",")[0] for n in node_lines}
    assert len(accounts) == 2 and a.gke is not None  # each team's own node account
    assert a.gke.node_service_account not in accounts
    assert not any("WARNING" in n for n in notes)


def test_plan_warns_of_a_bucket_two_teams_share(two_teams: None,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """B's profile as it loads (its bucket from the environment) names A's bucket: the plan
    says the two teams are not isolated and which field to change."""
    for key, value in {**SMOKE_REQUIRED, "gke.bucket": A_BUCKET}.items():
        monkeypatch.setenv("TPURL_GKE__" + key.removeprefix("gke.").upper(), value)
    a, _ = _profiles()
    (warning,) = [n for n in gke_plan_notes(a) if "WARNING" in n]
    assert f"gs://{A_BUCKET} is the bucket of teams team-a, team-b" in warning
    assert "gke.bucket" in warning


def test_each_teams_account_is_applied_with_its_queue(two_teams: None) -> None:
    """The Kueue configuration the blueprint applies holds each team's service account in
    the namespace, so a team's pods are never refused for an account that is missing."""
    from flows.backends.gke.infra.kueue_objects import KUEUE_TEMPLATE, kueue_documents
    from flows.backends.gke.infra.team_quota import checked_quotas
    from flows.config.teams import load_teams

    a, _ = _profiles()
    assert a.gke is not None
    quotas = checked_quotas(load_teams(), a.gke.total_chips, {})
    accounts = {(d["metadata"]["name"], d["metadata"]["namespace"])
                for d in kueue_documents(KUEUE_TEMPLATE.read_text(), a.gke, quotas)
                if d["kind"] == "ServiceAccount"}
    assert accounts == {("tpurl-team-team-a", "default"), ("tpurl-team-team-b", "default")}


def _worker_pods(profile: Profile) -> list[dict]:
    """The pods of the profile's JobSets on the host's network: the Pathways workers."""
    jobsets = [o for o in render_all(profile, planned_workloads(profile, GkeRuntime(profile)))
               if o["kind"] == "JobSet"]
    return [pod for js in jobsets for pod in pods(js) if pod.get("hostNetwork")]


def test_team_a_workers_cannot_write_team_b_bucket(two_teams: None) -> None:
    """The attack: the Pathways workers of team A act as the node account of the pool they
    run on (host network); before, one node account held objectAdmin on every team's
    bucket."""
    a, b = _profiles()
    bindings = _granted(a, b)
    assert a.gke is not None
    workers = _worker_pods(a)
    assert workers
    node = node_account(a.gke.project, a.gke.cluster, "team-a")  # its pools' (blueprint)
    for pod in workers:
        member = acting_member(pod, node_account=node,
                               project=a.gke.project, namespace=a.gke.namespace,
                               project_number=NUMBER)
        assert may_write(member, A_BUCKET, bindings), member
        assert not may_write(member, B_BUCKET, bindings), member
