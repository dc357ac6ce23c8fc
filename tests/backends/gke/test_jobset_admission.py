"""Each team's JobSet admission policy (flows/backends/gke/jobset_admission.py, generated into
deployments/work-pool/teams/TEAM/admission.yaml), evaluated with a real CEL interpreter
(cel-python) against the JobSets the product renders, for two teams.

The attack: code in team B's flow pod submits a JobSet whose pods run as team A's account,
read A's Secret, or land on A's pools. RBAC admits it (the flow Role grants JobSet create,
whatever the pod template holds: ``test_rbac_alone_admits_the_attack``); the policy of the
submitting flow account refuses it, and admits every JobSet the product renders for its own
team (train, convert, export, evaluate, watch).

How a ValidatingAdmissionPolicy is evaluated, as ``_admission`` does it, from kubernetes/
kubernetes staging/src/k8s.io/api/admissionregistration/v1/types.go: the policy applies to a
request its matchConstraints' resourceRules match (``MatchResources``) and whose every
matchCondition is true (``ValidatingAdmissionPolicySpec.MatchConditions``: "If ANY
matchCondition evaluates to FALSE, the policy is skipped. If ALL matchConditions evaluate to
TRUE, the policy is evaluated"); ``variables`` are evaluated in order, each seeing the earlier ones as
``variables.NAME`` (``Variable``); the request is refused with a validation's ``message`` when
its expression is false (``Validation``) and the binding's ``validationActions`` hold ``Deny``.
``request.userInfo.username`` of a service account is ``system:serviceaccount:NS:NAME``.
What stays unproven: that GKE's API server type-checks and evaluates the same expressions
against the JobSet CRD's schema as cel-python does against the JSON (the test of the CRD
schema below checks every field the expressions test exists there).
"""

from __future__ import annotations

import copy
from functools import cache
from typing import Any

import celpy
import kubernetes_validate
import pytest
import yaml

from flows.backends.gke import flow_pools
from flows.backends.gke.jobs.manifests import render_all
from flows.backends.gke.jobs.render import render_jobset
from flows.backends.gke.jobset_admission import NODE_VOLUME_KINDS, team_policy
from flows.backends.gke.runtime import GkeRuntime
from flows.backends.gke.team_identity import team_account
from flows.config.profile import Profile
from flows.core.eval_programs import evaluate_workload
from flows.core.layout import Layout
from flows.core.planned_programs import planned_workloads
from flows.operations.watch import WATCH_STAGE
from tests.fakes.kube_api.rbac import allowed, attributes, role_rules
from tests.support.jobset_schema import JOBSET_CRD, KUBERNETES_VERSION
from tests.support.profiles import SMOKE, TUTORIAL, smoke_profile, tutorial_profile

NS = "default"
TEAMS = {"team-a": [TUTORIAL], "team-b": [SMOKE]}
_ENV = celpy.Environment()  # its CompiledRunner mis-evaluates `has(..) ? list : list`


@cache
def _program(expression: str) -> Any:
    return _ENV.program(_ENV.compile(expression))


def _eval(expression: str, activation: dict[str, Any]) -> Any:
    return _program(expression).evaluate(activation)


def _admission(docs: list[dict[str, Any]], obj: dict[str, Any], user: str,
               operation: str = "CREATE") -> str | None:
    """The message the policy of ``docs`` refuses ``obj`` with when ``user`` submits it, or
    None when it admits it (or does not apply)."""
    policy = next(d for d in docs if d["kind"] == "ValidatingAdmissionPolicy")
    binding = next(d for d in docs if d["kind"] == "ValidatingAdmissionPolicyBinding")
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    spec = policy["spec"]
    group, _ = obj["apiVersion"].split("/")
    if not any(group in r["apiGroups"] and operation in r["operations"]
               and "jobsets" in r["resources"] and obj["kind"] == "JobSet"
               for r in spec["matchConstraints"]["resourceRules"]):
        return None
    activation: dict[str, Any] = {
        "object": celpy.json_to_cel(obj),
        "request": celpy.json_to_cel({"operation": operation,
                                      "userInfo": {"username": user}})}
    if not all(_eval(c["expression"], activation) for c in spec["matchConditions"]):
        return None
    variables: dict[str, Any] = {}
    for var in spec["variables"]:
        activation["variables"] = celpy.celtypes.MapType(
            {celpy.celtypes.StringType(k): v for k, v in variables.items()})
        variables[var["name"]] = _eval(var["expression"], activation)
    activation["variables"] = celpy.celtypes.MapType(
        {celpy.celtypes.StringType(k): v for k, v in variables.items()})
    assert binding["spec"]["validationActions"] == ["Deny"]
    for rule in spec["validations"]:
        result = _eval(rule["expression"], activation)
        assert isinstance(result, celpy.celtypes.BoolType), (rule["expression"], result)
        if not result:
            return str(rule["message"])
    return None


def _flow(team: str) -> str:
    return f"system:serviceaccount:{NS}:{flow_pools.flow_account_id(team)}"


@cache
def _policy(team: str) -> list[dict[str, Any]]:
    """The team's policy as the generator writes it (its YAML read back)."""
    text = flow_pools.admission_text(team, flow_pools.sources_of(TEAMS[team]))
    return [d for d in yaml.safe_load_all(text) if d]


def _profile(team: str) -> Profile:
    if team == "team-a":
        return tutorial_profile(**{"eval.batches": "2"})
    return smoke_profile(**{"eval.batches": "2", "gke.max_usd_per_run": "60"})  # its estimate


def _jobsets(team: str) -> dict[str, dict[str, Any]]:
    """Every JobSet kind the product renders for the team's profile, by stage: the planned
    ones (convert, train, export), an evaluation and a watch's evaluation."""
    profile = _profile(team)
    runtime = GkeRuntime(profile)
    out = {o["metadata"]["name"].rsplit("-", 1)[0]: o
           for o in render_all(profile, planned_workloads(profile, runtime))
           if o["kind"] == "JobSet"}
    layout = Layout(profile)
    evaluate = evaluate_workload(profile, layout, runtime, "trained",
                                 layout.actor_params(50))  # type: ignore[arg-type]
    out["evaluate"] = render_jobset(evaluate, profile, run="r1", stage="evaluate")
    out[WATCH_STAGE] = render_jobset(evaluate, profile, run="r1", stage=WATCH_STAGE)
    return out


def _pod_specs(jobset: dict[str, Any]) -> list[dict[str, Any]]:
    return [r["template"]["spec"]["template"]["spec"] for r in jobset["spec"]["replicatedJobs"]]


def _team_pod(jobset: dict[str, Any]) -> dict[str, Any]:
    """The first pod template that runs as the team's account (runs the team's code)."""
    return next(p for p in _pod_specs(jobset) if p.get("serviceAccountName"))


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, dict[str, Any]]]:
    """Every JobSet kind of each team, rendered once for the module (two teams' teams file,
    as conftest.py's ``two_teams``)."""
    with pytest.MonkeyPatch.context() as mp:
        teams_file = tmp_path_factory.mktemp("teams") / "teams.yaml"
        teams_file.write_text(yaml.safe_dump({"teams": {
            t: {"usd_per_month": 1000, "profiles": p} for t, p in TEAMS.items()}}))
        mp.setenv("TPURL_TEAMS_FILE", str(teams_file))
        return {team: _jobsets(team) for team in TEAMS}


def test_the_policies_are_valid_kubernetes_objects() -> None:
    for team in TEAMS:
        for doc in _policy(team):
            kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_every_jobset_kind_the_product_renders_is_admitted_for_its_own_team(
        rendered: dict[str, dict[str, dict[str, Any]]]) -> None:
    for team, jobsets in rendered.items():
        assert set(jobsets) >= {"convert", "train-rl", "export", "evaluate", WATCH_STAGE}
        for stage, jobset in jobsets.items():
            assert any(p.get("serviceAccountName") == team_account(team)
                       for p in _pod_specs(jobset)), stage
            assert _admission(_policy(team), jobset, _flow(team)) is None, (team, stage)


def test_rbac_alone_admits_the_attack() -> None:
    """Team B's flow Role grants the JobSet create whatever its pods run as: RBAC sees the
    verb, the resource and the name, never the pod template."""
    rules = role_rules(flow_pools.rbac_file("tutorial"), flow_pools.flow_account_id("tutorial"))
    assert allowed(rules, attributes("POST", "jobset.x-k8s.io", "jobsets", NS, None, None, {}))


def _attack(own: dict[str, Any], victim: str, attack: str) -> dict[str, Any]:
    """``own`` JobSet changed to reach ``victim``'s identity, Secret or pools, one way."""
    secret = flow_pools.team_secrets(victim, flow_pools.sources_of(TEAMS[victim]))[0]

    def env_secret(pod: dict[str, Any]) -> None:
        ref = next(e for c in pod["containers"] for e in c.get("env", [])
                   if "secretKeyRef" in e.get("valueFrom", {}))
        ref["valueFrom"]["secretKeyRef"]["name"] = secret

    edits: dict[str, Any] = {
        "serviceAccountName": lambda p: p.update(serviceAccountName=team_account(victim)),
        "serviceAccount": lambda p: p.update(serviceAccount=team_account(victim)),
        "secretKeyRef": env_secret,
        "envFrom": lambda p: p["containers"][0].setdefault("envFrom", []).append(
            {"secretRef": {"name": secret}}),
        "initContainers": lambda p: p.setdefault("initContainers", []).append(
            {"name": "steal", "image": "busybox", "env": [
                {"name": "T", "valueFrom": {"secretKeyRef": {"name": secret, "key": "value"}}}]}),
        "volume secret": lambda p: p.setdefault("volumes", []).append(
            {"name": "s", "secret": {"secretName": secret}}),
        "projected secret": lambda p: p.setdefault("volumes", []).append(
            {"name": "s", "projected": {"sources": [{"secret": {"name": secret}}]}}),
        "imagePullSecrets": lambda p: p.update(imagePullSecrets=[{"name": secret}]),
        "hostPath": lambda p: p.setdefault("volumes", []).append(
            {"name": "h", "hostPath": {"path": "/var/lib/kubelet"}}),
        "nodeSelector": lambda p: p.setdefault("nodeSelector", {}).update(
            {"tpurl/team": victim}),
        "toleration": lambda p: p.setdefault("tolerations", []).append(
            {"key": "tpurl/team", "operator": "Equal", "value": victim,
             "effect": "NoSchedule"}),
        "toleration Exists": lambda p: p.setdefault("tolerations", []).append(
            {"key": "tpurl/team", "operator": "Exists", "effect": "NoSchedule"}),
        "toleration of every taint": lambda p: p.setdefault("tolerations", []).append(
            {"operator": "Exists"}),
        "nodeName": lambda p: p.update(nodeName="gke-tpu-b-node-1"),
        "hostNetwork on a shared pool": lambda p: p.update(hostNetwork=True),
    }
    out = copy.deepcopy(own)
    edits[attack](_team_pod(out))
    return out


FIELD_NAMED = {
    "serviceAccountName": "serviceAccountName", "serviceAccount": "serviceAccountName",
    "secretKeyRef": "secretKeyRef", "envFrom": "envFrom", "initContainers": "secretKeyRef",
    "volume secret": "volumes[]", "projected secret": "volumes[]",
    "imagePullSecrets": "imagePullSecrets", "hostPath": "hostPath",
    "nodeSelector": "nodeSelector['tpurl/team']", "toleration": "tolerations[]",
    "toleration Exists": "tolerations[]", "toleration of every taint": "tolerations[]",
    "nodeName": "nodeName", "hostNetwork on a shared pool": "hostNetwork",
}


# The JobSets each way is tried from: a Pathways one (a head as the team, workers with no
# account on the host network) and a CPU pool one; every kind of JobSet is tried with the
# ways of the three rules that matter most (a CEL evaluation costs ~0.1 s in cel-python).
RICHEST = ("train-rl", "convert")
EVERY_KIND = ("serviceAccountName", "secretKeyRef", "toleration")


def _refused(rendered: dict[str, dict[str, dict[str, Any]]], attack: str,
             stages: tuple[str, ...] | None) -> None:
    for team, victim in (("team-a", "team-b"), ("team-b", "team-a")):
        for stage, jobset in rendered[team].items():
            if stages is not None and stage not in stages:
                continue
            bad = _attack(jobset, victim, attack)
            message = _admission(_policy(team), bad, _flow(team))
            assert message is not None, (team, stage, attack)
            assert FIELD_NAMED[attack] in message and "fix:" in message, message
            assert _admission(_policy(victim), bad, _flow(team)) is None


@pytest.mark.parametrize("attack", sorted(FIELD_NAMED))
def test_a_flow_cannot_reach_the_other_teams_identity_secret_or_pools(
        rendered: dict[str, dict[str, dict[str, Any]]], attack: str) -> None:
    """Each team's JobSet changed one way towards the other team, submitted by the team's
    own flow account: refused by its policy, the message naming the field and the fix; the
    other team's policy does not apply to this flow account."""
    _refused(rendered, attack, RICHEST)


@pytest.mark.parametrize("attack", EVERY_KIND)
def test_every_jobset_kind_is_refused_when_it_reaches_the_other_team(
        rendered: dict[str, dict[str, dict[str, Any]]], attack: str) -> None:
    """Train, convert, export, evaluate and watch, of both teams: another team's account,
    Secret or pool refused."""
    _refused(rendered, attack, None)


def test_a_secret_sharing_the_teams_prefix_but_not_its_own_is_refused(
        rendered: dict[str, dict[str, dict[str, Any]]]) -> None:
    """Team ``a``'s prefix, tpurl-team-a-, starts team ``a-b``'s Secrets too: the policy
    names the team's Secrets exactly, so one of the prefix that is not the team's is
    refused, and the team's own (the boundary) admitted."""
    own = rendered["team-a"]["convert"]
    ref = next(e for c in _team_pod(own)["containers"] for e in c.get("env", [])
               if "secretKeyRef" in e.get("valueFrom", {}))["valueFrom"]["secretKeyRef"]
    assert ref["name"].startswith("tpurl-team-team-a-")
    assert _admission(_policy("team-a"), own, _flow("team-a")) is None
    bad = copy.deepcopy(own)
    next(e for c in _team_pod(bad)["containers"] for e in c.get("env", [])
         if "secretKeyRef" in e.get("valueFrom", {}))["valueFrom"]["secretKeyRef"]["name"] = (
        "tpurl-team-team-a-b-env-hf-token-000000")
    assert _admission(_policy("team-a"), bad, _flow("team-a")) is not None


def test_an_absent_or_default_account_is_admitted_and_an_update_is_checked(
        rendered: dict[str, dict[str, dict[str, Any]]]) -> None:
    """The Pathways workers name no account (the namespace's default, bound to nothing):
    admitted, and so is ``default`` named; an update is checked as a create is."""
    train = rendered["team-a"]["train-rl"]
    assert any("serviceAccountName" not in p for p in _pod_specs(train))
    named = copy.deepcopy(train)
    for pod in _pod_specs(named):
        pod.setdefault("serviceAccountName", "default")
    assert _admission(_policy("team-a"), named, _flow("team-a")) is None
    bad = _attack(train, "team-b", "serviceAccountName")
    assert _admission(_policy("team-a"), bad, _flow("team-a"), "UPDATE") is not None


def test_every_field_the_policy_tests_is_in_the_jobset_crds_pod_template() -> None:
    """On the API server the expressions are type-checked against the JobSet CRD's schema: a
    field it lacks is a compile error. Each one they test is in JobSet v0.10.1's schema."""
    crd = yaml.safe_load(JOBSET_CRD.read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    rj = schema["properties"]["spec"]["properties"]["replicatedJobs"]["items"]
    pod = rj["properties"]["template"]["properties"]["spec"]["properties"]["template"][
        "properties"]["spec"]["properties"]
    for field in ("serviceAccountName", "serviceAccount", "containers", "initContainers",
                  "volumes", "imagePullSecrets", "nodeName", "nodeSelector", "hostNetwork",
                  "tolerations"):
        assert field in pod, field
    assert "additionalProperties" in pod["nodeSelector"]  # a map: `in` and [] work
    volume = pod["volumes"]["items"]["properties"]
    for kind in (*NODE_VOLUME_KINDS, "secret", "projected"):
        assert kind in volume, kind
    container = pod["containers"]["items"]["properties"]
    assert {"env", "envFrom"} <= set(container)
    assert "secret" in volume["projected"]["properties"]["sources"]["items"]["properties"]


def test_the_shipped_policy_is_the_one_the_tests_evaluate() -> None:
    """deployments/work-pool/teams/tutorial/admission.yaml is the generator's output (the
    drift test covers every file), built by ``team_policy``."""
    shipped = [d for d in yaml.safe_load_all(
        flow_pools.admission_file("tutorial").read_text()) if d]
    from flows.config.teams import TEAMS_FILE, load_teams

    profiles = load_teams(TEAMS_FILE).teams["tutorial"].profiles
    assert shipped == team_policy("tutorial", flow_pools.flow_account_id("tutorial"),
                                  flow_pools.team_secrets(
                                      "tutorial", flow_pools.sources_of(profiles)))


# The flow account of profiles in no team (tpurl-flow, deployments/work-pool/rbac.yaml):
# its pods run as the namespace's default, its Secrets are owned by the profile
# (``tpurl-profile-...``, jobs/naming.py secret_name), it places pods on no team's pool.
TEAMLESS = "system:serviceaccount:default:tpurl-flow"


def _shipped_policies() -> list[list[dict[str, Any]]]:
    """Every admission policy the repository ships for the flow accounts, as applied."""
    from flows.common.paths import REPO_ROOT

    out = []
    for path in sorted((REPO_ROOT / "deployments" / "work-pool").rglob("admission.yaml")):
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
        out += [[p, b] for p in docs if p["kind"] == "ValidatingAdmissionPolicy"
                for b in docs if b["kind"] == "ValidatingAdmissionPolicyBinding"
                and b["spec"]["policyName"] == p["metadata"]["name"]]
    return out


def _teamless_refusal(jobset: dict[str, Any], operation: str = "CREATE") -> str | None:
    """What the shipped policies refuse a JobSet the team-less flow account submits with."""
    return next((m for docs in _shipped_policies()
                 if (m := _admission(docs, jobset, TEAMLESS, operation)) is not None), None)


@pytest.fixture(scope="module")
def teamless(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """The JobSets of the smoke profile in no team (an empty teams file)."""
    with pytest.MonkeyPatch.context() as mp:
        teams_file = tmp_path_factory.mktemp("noteams") / "teams.yaml"
        teams_file.write_text("teams: {}\n")
        mp.setenv("TPURL_TEAMS_FILE", str(teams_file))
        return _jobsets("team-b")  # the smoke profile, here in no team


TEAMLESS_ATTACKS = ("serviceAccountName", "secretKeyRef", "volume secret", "hostPath",
                    "nodeSelector", "toleration", "toleration of every taint", "nodeName")


@pytest.mark.parametrize("attack", TEAMLESS_ATTACKS)
def test_the_teamless_flow_cannot_reach_a_teams_identity_secret_or_pools(
        teamless: dict[str, dict[str, Any]], attack: str) -> None:
    """The attack: code in a flow pod of a profile in no team submits a JobSet whose pods run
    as team a's account, read team a's Secret, mount the node, or land on team a's pools.
    RBAC admits it (the shared Role grants JobSet create); the team-less flow account's own
    policy refuses it, naming the field and the fix."""
    bad = _attack(teamless["train-rl"] if attack != "secretKeyRef" else teamless["convert"],
                  "team-a", attack)
    message = _teamless_refusal(bad)
    assert message is not None, attack
    assert FIELD_NAMED[attack] in message and "fix:" in message, message


def test_the_teamless_policy_is_shipped_valid_and_as_generated() -> None:
    from flows.backends.gke.jobset_admission import teamless_policy

    shipped = [d for d in yaml.safe_load_all(flow_pools.admission_file(None).read_text()) if d]
    assert shipped == teamless_policy(flow_pools.SHARED_ACCOUNT)
    for doc in shipped:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_every_jobset_the_teamless_flow_renders_is_admitted(
        teamless: dict[str, dict[str, Any]]) -> None:
    """Its own JobSets, every kind: pods as default (named or not), its profile's Secrets,
    the base pool; an update is checked as a create."""
    for stage, jobset in teamless.items():
        assert _teamless_refusal(jobset) is None, stage
    ref = next(e for p in _pod_specs(teamless["convert"]) for c in p["containers"]
               for e in c.get("env", []) if "secretKeyRef" in e.get("valueFrom", {}))
    assert ref["valueFrom"]["secretKeyRef"]["name"].startswith("tpurl-profile-")
    bad = _attack(teamless["convert"], "team-a", "serviceAccountName")
    assert _teamless_refusal(bad, "UPDATE") is not None
