"""The flow pod's Role (deployments/work-pool/rbac.yaml) is derived from the code: the GKE
backend runs against the fake API with that Role and ClusterRole enforced the way the API
server enforces them (tests/fakes/kube_api/rbac.py), every request's (API group, resource
[/subresource], verb) is recorded, and the Role must grant each one and nothing more. The
runs cover every capacity mode of flows/config/capacity.py (queued provisioning's wait reads
ProvisioningRequests, a group of its own), a fallback from one mode to the next, reruns (the
Secrets replaced, the JobSet reattached), a failed JobSet (its nodes read) and an interrupted
stage (its JobSet deleted).

What the runs cover is checked against the source: every Kubernetes client call in
flows/backends/gke, with the API group and resource its arguments name, must be one the runs
made, so a new call that no run exercises fails here instead of on a real cluster.
Pre-flight's cluster reads (flows/backends/gke/infra/cloud.py ``RestGoogleApis._kube``:
controller Deployments, the JobSet CRD, Kueue queues and flavors) go with the Google
identity's token, authorised by IAM (roles/container.viewer), not by this Role, so they are
not part of it.
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import importlib
import json
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from flows.backends.gke import capacity_run
from flows.backends.gke.secret_grants import role_of, shipped_replaceable, written_secrets
from flows.backends.gke.watch.forbidden import FORBIDDEN_CODE
from flows.config.capacity import CAPACITY_MODES
from flows.core.failures import FailureCategory, StageFailed
from flows.core.layout import Layout
from flows.core.planned_programs import planned_workloads
from flows.core.programs import convert_workload
from flows.core.storage import file_uri
from tests.backends.gke.test_capacity_chain import groups_for, queued_on
from tests.fakes.gke_backend import BUDGETS, ListLogger, make_backend, no_jobsets_left, run_stage
from tests.fakes.kube_api import FakeApiServer, FakeKube
from tests.fakes.kube_api.node_groups import ClusterAutoscaler, NodeGroup
from tests.fakes.kube_api.rbac import Call, granted, role_rules
from tests.fakes.kube_api.scenarios import (
    admit,
    pending,
    say,
    scenario,
    start,
    succeed,
    worker_crashes,
)
from tests.fakes.kueue_cohort import Cohort, Queue
from tests.support.gke_world import naming_session_secrets
from tests.support.polling import until
from tests.support.profiles import (
    TUTORIAL,
    capacity_overrides,
    fake_hf_token,
    tutorial_profile,
)

ROOT = Path(__file__).resolve().parents[3]
RBAC = ROOT / "deployments/work-pool/rbac.yaml"
GKE_SOURCE = ROOT / "flows/backends/gke"
WANDB_DOC = ROOT / "docs/integrations/wandb.md"
# kubernetes client method → the RBAC verb its request carries (requestinfo.go); a list
# handed to functools.partial feeds a list+watch cache (flows/backends/gke/watch/stream.py),
# so it is both
METHOD = re.compile(r"(list|read|get|create|replace|patch|delete)_(namespaced_\w+|node)")
METHOD_VERBS = {"list": "list", "read": "get", "get": "get", "create": "create",
                "replace": "update", "patch": "patch", "delete": "delete"}
CORE_RESOURCES = {"namespaced_pod": "pods", "namespaced_pod_log": "pods/log",
                  "namespaced_event": "events", "namespaced_secret": "secrets", "node": "nodes",
                  "namespaced_config_map": "configmaps"}
PR_LIST = ("autoscaling.x-k8s.io", "provisioningrequests", "list")
RUN = [(0.05, admit), (0.05, start), (0.05, say("step 1", "saved checkpoint 1")),
       (0.1, succeed)]


def shipped_role() -> list[dict[str, Any]]:
    """The shipped Role's rules, naming the Secrets of this session's profiles too
    (tests/support/gke_world.py ``naming_session_secrets``)."""
    return naming_session_secrets(role_rules(RBAC))


def enforcing(rules: list[dict[str, Any]] | None = None) -> FakeKube:
    """A fake API that refuses what the shipped Role and ClusterRole (or ``rules`` in the
    Role's place) do not grant."""
    kube = FakeKube()
    kube.rbac_rules = shipped_role() if rules is None else rules
    kube.rbac_cluster_rules = role_rules(RBAC, kind="ClusterRole")
    return kube


def wandb_key(label: str) -> str:
    """A value shaped like a W&B API key (40 hex digits), built at run time."""
    return (label.encode().hex() + "0" * 40)[:40]


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeApiServer]:
    monkeypatch.setenv("HF_TOKEN", fake_hf_token("CANARYrbac"))
    monkeypatch.setenv("WANDB_API_KEY", wandb_key("rbac"))
    with FakeApiServer(enforcing()) as srv:
        yield srv


def tracking_overrides() -> dict[str, str]:
    """The ``tracking:`` section docs/integrations/wandb.md shows, as --set overrides."""
    block = re.search(r"```yaml\n(tracking:.*?)```", WANDB_DOC.read_text(), re.S)
    assert block, f"{WANDB_DOC} shows no tracking section"
    import yaml

    def flat(prefix: str, value: Any) -> dict[str, str]:
        if isinstance(value, dict):
            return {k: v for key, item in value.items() for k, v in flat(f"{prefix}.{key}",
                                                                           item).items()}
        return {prefix: str(value)}
    return flat("tracking", yaml.safe_load(block[1])["tracking"])


def _exercise(server: FakeApiServer, tmp_path: Path) -> None:
    """The paths of the backend besides capacity: submit and watch to success, rerun
    (Secrets exist → update, the W&B key's too; JobSet exists → read, reattach), the
    leftover check, the evaluation's ConfigMap, a failed JobSet, an interrupted stage."""
    kube = scenario(server.kube, [(0.1, admit), (0.05, start), (0.05, say("step 1")),
                                  (0.1, succeed)])
    tracked = tutorial_profile(**tracking_overrides())
    for _ in range(2):
        outcome, logger, _, backend = run_stage(server, "train", tmp_path, profile=tracked)
        assert not isinstance(outcome, StageFailed), (outcome, logger.lines)
    assert backend.clear_leftovers("train", str(tmp_path / "out")) == 0

    # a spend cap on a pool that scales from zero: the meter lists and watches the run's TPU
    # nodes, cluster-scoped (watch/tpu_nodes.py). Another configuration of the same stage:
    # the finished JobSet of the runs above goes first, as an operator would delete it
    for finished in kube.find("jobsets"):
        kube.delete("jobsets", "default", finished["metadata"]["name"])
    assert no_jobsets_left(kube)
    capped = tutorial_profile(**capacity_overrides("on-demand"),
                              **{"gke.max_usd_per_run": "2000"})
    scenario(kube, [(0.1, admit), (0.05, start), (0.1, succeed)])
    outcome, logger, _, _ = run_stage(server, "train", tmp_path, profile=capped)
    assert not isinstance(outcome, StageFailed), (outcome, logger.lines)

    _behind_a_borrower(server, kube, tmp_path)

    # the evaluation ships its program as an immutable ConfigMap: created, then on rerun a
    # 409, and the one there read and compared (jobset_client.py ship_programs)
    evaluating = tutorial_profile(**{"eval.batches": "2"})
    for _ in range(2):
        scenario(kube, [(0.1, admit), (0.05, start), (0.1, succeed)])
        outcome, logger, _, _ = run_stage(server, "evaluate", tmp_path, profile=evaluating)
        assert not isinstance(outcome, StageFailed), (outcome, logger.lines)
    assert len(kube.find("configmaps")) == 1

    # a JobSet that fails with no disruption seen: the watch asks whether the nodes of the
    # pods still bound exist (watch/monitor.py _node_gone), a cluster-scoped read
    scenario(kube, [(0.1, admit), (0.05, start), (0.05, worker_crashes)])
    outcome, logger, _, _ = run_stage(server, "export", tmp_path)
    assert isinstance(outcome, StageFailed), logger.lines
    assert outcome.diagnosis.code != FORBIDDEN_CODE, outcome.diagnosis

    scenario(kube, [(0.1, admit), (0.05, start)])

    class Interrupting(ListLogger):
        def info(self, msg: str, *args: object) -> None:
            super().info(msg, *args)
            if "is running" in self.lines[-1]:
                raise KeyboardInterrupt

    backend = make_backend(server.url, "convert", tmp_path, Interrupting())
    workload = convert_workload(backend.profile, Layout(backend.profile), backend.runtime)
    with pytest.raises(KeyboardInterrupt):
        backend.run_workload(workload, file_uri(tmp_path / "c.log"))


def _behind_a_borrower(server: FakeApiServer, kube: FakeKube, tmp_path: Path) -> None:
    """A team's train stage waiting for chips another team borrows: the watch lists the
    ClusterQueues, cluster-scoped (watch/kueue_cohort.py)."""
    for finished in kube.find("jobsets"):
        kube.delete("jobsets", "default", finished["metadata"]["name"])
    assert no_jobsets_left(kube)
    cohort = Cohort("tpu-on-demand", {"team-a": Queue("team-a", 16, 16),
                                      "team-b": Queue("team-b", 16, 16)})
    cohort.submit("b-run", "team-b", 32)
    cohort.schedule()
    ours = cohort.submit("a-run", "team-a", 16)
    assert cohort.schedule() == []
    [why] = [c["message"] for c in cohort.workload_object(ours)["status"]["conditions"]]
    for cq in cohort.cluster_queue_objects("tpurl-cluster"):
        kube.create("clusterqueues", "", cq)
    teams = tmp_path / "teams.yaml"
    teams.write_text(f"teams:\n  a: {{usd_per_month: 5000, profiles: [{TUTORIAL}]}}\n")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("TPURL_TEAMS_FILE", str(teams))
        scenario(kube, [(0.05, pending(why)), (1.0, admit), (0.05, start), (0.1, succeed)])
        outcome, logger, _, _ = run_stage(server, "train", tmp_path)
    assert not isinstance(outcome, StageFailed), (outcome, logger.lines)
    assert any("team-b borrows 16 of 32 chips" in line for line in logger.lines), logger.lines


def _train_in(mode: str, tmp_path: Path, rules: list[dict[str, Any]] | None = None,
              capacity_comes: bool = True, **queued: Any
              ) -> tuple[Any, FakeKube, list[str]]:
    """One train stage in capacity ``mode`` (a mode or a chain) on a cluster with its pools
    (tests/fakes/kube_api/node_groups.py; queued provisioning's DWS, provisioning.py), the
    shipped Role enforced (or ``rules`` in its place); the outcome, the fake's record and
    the stage's log. Queued capacity comes once the watch has listed the requests, unless
    ``capacity_comes`` is False or ``queued`` (DWS's settings) are given: then never."""
    profile = tutorial_profile(**capacity_overrides(mode), **{"gke.zones": "us-east5-b"})
    with FakeApiServer(enforcing(rules)) as srv:
        if "queued" in mode:
            scaler, dws, group = queued_on(srv, profile, **queued)
            group.stockout = True
            if capacity_comes and not queued:  # after the watch asked why the JobSet waits
                threading.Thread(target=_capacity_once_asked, args=(srv.kube, group),
                                 daemon=True).start()
        else:
            scaler, dws = ClusterAutoscaler(srv.kube, groups_for(profile, provision_s=0.2)), None
        try:
            scenario(srv.kube, RUN, RUN)
            outcome, logger, _, _ = run_stage(srv, "train", tmp_path / mode.replace(",", "-"),
                                              dataclasses.replace(BUDGETS, schedule_s=30.0),
                                              profile=profile)
        finally:
            if dws is not None:
                dws.stop()
            scaler.stop()
        return outcome, srv.kube, logger.lines


def _capacity_once_asked(kube: FakeKube, group: NodeGroup) -> None:
    if until(lambda: PR_LIST in kube.calls, within_s=60):
        group.stockout = False


@pytest.fixture(scope="module")
def capacity_runs(tmp_path_factory: pytest.TempPathFactory
                  ) -> dict[str, tuple[Any, FakeKube, list[str]]]:
    """A train stage in every capacity mode, and one whose queued provisioning keeps failing
    so it falls back to on-demand, each under the shipped Role."""
    tmp = tmp_path_factory.mktemp("capacity")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("HF_TOKEN", fake_hf_token("CANARYrbac"))
        # the fallback's event goes to the run's Prefect API, which these stages have not
        env.setattr(capacity_run, "emit_event", lambda **_: None)
        runs = {mode: _train_in(mode, tmp) for mode in CAPACITY_MODES}
        runs["queued,on-demand"] = _train_in("queued,on-demand", tmp, fail_after_s=0.2,
                                             backoff_limit=1, backoff_s=0.1)
    return runs


@pytest.mark.parametrize("mode", [*CAPACITY_MODES, "queued,on-demand"])
def test_every_capacity_mode_trains_under_the_shipped_role(
        capacity_runs: dict[str, tuple[Any, FakeKube, list[str]]], mode: str) -> None:
    outcome, kube, lines = capacity_runs[mode]
    assert not isinstance(outcome, StageFailed), (outcome, lines)
    assert kube.denied == set(), f"the Role refused {sorted(kube.denied)}"
    if "queued" in mode:
        assert PR_LIST in kube.calls
    if mode == "queued,on-demand":
        assert [(a["mode"], a["outcome"]) for a in outcome.capacity] == [
            ("queued", "no-capacity"), ("on-demand", "succeeded")], outcome.capacity


def source_calls() -> set[Call]:
    """Every (group, resource, verb) the Kubernetes client calls in flows/backends/gke make:
    the method names the verb (and a core resource); a custom object's group and plural are
    its first and fourth arguments, read from the module's constants. A call's arguments
    follow the method where it is called, passed to ``functools.partial`` (a watch's list,
    so list and watch) or to the backend's ``_call``."""
    found: set[Call] = set()
    for path in sorted(GKE_SOURCE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        module = importlib.import_module(".".join(path.relative_to(ROOT).with_suffix("")
                                                  .parts))
        for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
            for position, node in [(-1, call.func), *enumerate(call.args)]:
                if not (isinstance(node, ast.Attribute) and (m := METHOD.fullmatch(node.attr))
                        and ast.unparse(node.value).split(".")[-1] in ("core", "custom")):
                    continue
                args = call.args[position + 1:]
                partial = position >= 0 and ast.unparse(call.func).endswith("partial")
                verbs = {"list", "watch"} if partial and m[1] == "list" else {METHOD_VERBS[m[1]]}
                if m[2].endswith("custom_object"):
                    group, plural = (_value(module, args[i]) for i in (0, 3))
                    resource = plural
                else:
                    group, resource = "", CORE_RESOURCES[m[2]]
                found |= {(group, resource, verb) for verb in verbs}
    return found


def _value(module: Any, node: ast.expr) -> str:
    if isinstance(node, ast.Constant):
        return str(node.value)
    assert isinstance(node, ast.Name), f"{module.__name__}: {ast.unparse(node)} is no constant"
    return str(getattr(module, node.id))


def test_the_role_grants_every_call_the_backend_makes_and_nothing_more(
        server: FakeApiServer, tmp_path: Path,
        capacity_runs: dict[str, tuple[Any, FakeKube, list[str]]]) -> None:
    _exercise(server, tmp_path)
    kubes = [server.kube, *(kube for _, kube, _ in capacity_runs.values())]
    calls: set[Call] = set().union(*(kube.calls for kube in kubes))
    denied: set[Call] = set().union(*(kube.denied for kube in kubes))
    assert denied == set(), f"the Role refused {sorted(denied)}"
    role = granted(role_rules(RBAC)) | granted(role_rules(RBAC, kind="ClusterRole"))
    assert calls - role == set(), f"the Role lacks {sorted(calls - role)}"
    assert role - calls == set(), f"the Role grants unused {sorted(role - calls)}"
    # and the runs reach every client call in the source, by group, resource and verb
    made = source_calls()
    assert PR_LIST in made, "stale pattern"
    assert made - calls == set(), f"no run makes {sorted(made - calls)}"


def _without(group: str) -> list[dict[str, Any]]:
    return [r for r in shipped_role() if group not in (r.get("apiGroups") or [])]


def test_a_refused_provisioning_request_list_is_diagnosed_not_a_queue_timeout(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Role without the ProvisioningRequests rule: every list is a 403 (the fake answers
    as the API server does), and the queued wait ends at once naming the permission and the
    fix, instead of waiting out the queue budget as if the API were failing."""
    monkeypatch.setenv("HF_TOKEN", fake_hf_token("CANARYrbac"))
    outcome, kube, lines = _train_in("queued", tmp_path, rules=_without("autoscaling.x-k8s.io"),
                                     capacity_comes=False)
    assert PR_LIST in kube.denied, (
        outcome, lines)
    assert isinstance(outcome, StageFailed), outcome
    diagnosis = outcome.diagnosis
    assert diagnosis.code == FORBIDDEN_CODE, diagnosis
    assert diagnosis.category is FailureCategory.USER_ERROR
    assert "list provisioningrequests (API group \"autoscaling.x-k8s.io\")" in diagnosis.summary
    assert "kubectl apply -f deployments/work-pool/rbac.yaml" in diagnosis.fix
    assert "is forbidden: User" in diagnosis.detail
    assert not kube.find("jobsets"), "the refused stage's JobSet was left behind"


def test_a_refused_watch_of_core_objects_is_diagnosed(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The same for a core resource: a Role without events list/watch (the autoscaler's
    events) fails the stage naming it, not as the API failing once the run budget is out."""
    monkeypatch.setenv("HF_TOKEN", fake_hf_token("CANARYrbac"))
    rules = shipped_role()
    for rule in rules:
        if "events" in (rule.get("resources") or []):
            rule["resources"].remove("events")
    with FakeApiServer(enforcing(rules)) as srv:
        scenario(srv.kube, [(0.05, admit), (0.05, start), (30.0, succeed)])
        outcome, logger, _, _ = run_stage(srv, "train", tmp_path)
    assert isinstance(outcome, StageFailed), logger.lines
    assert outcome.diagnosis.code == FORBIDDEN_CODE, outcome.diagnosis
    assert 'events (the core API group) in namespace default' in outcome.diagnosis.summary


def test_a_refused_leftover_check_is_diagnosed(tmp_path: Path) -> None:
    """Before a stage clears its output directory it lists the run's JobSets: refused, the
    stage fails naming the grant, not with the client's exception."""
    rules = shipped_role()
    for rule in rules:
        if rule.get("resources") == ["jobsets"]:
            rule["verbs"].remove("list")
    with FakeApiServer(enforcing(rules)) as srv:
        backend = make_backend(srv.url, "train", tmp_path, ListLogger())
        with pytest.raises(StageFailed) as failed:
            backend.clear_leftovers("train", str(tmp_path / "out"))
    assert failed.value.diagnosis.code == FORBIDDEN_CODE, failed.value.diagnosis
    assert 'list jobsets (API group "jobset.x-k8s.io")' in failed.value.diagnosis.summary


def _secret_rules() -> list[dict]:
    return [r for r in role_rules(RBAC) if set(r.get("resources") or []) & {"secrets",
                                                                            "configmaps"}]


def test_every_secret_a_shipped_or_tracking_profile_writes_may_be_replaced(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Every write verb on secrets and configmaps names the objects it may touch, except
    ``create``, which RBAC cannot limit by name (the name is in the body: requestinfo leaves
    it empty, and ResourceNameMatches never matches an empty name against a list) and which
    cannot overwrite (409 AlreadyExists). And every Secret a shipped GKE profile writes,
    with the tracking section docs/integrations/wandb.md shows or without, is one the Role
    of its owner's flow pods lets the flow replace (secret_grants.py: what `tpurl plan`
    lists), each owned as the shipped teams file says (the tutorial team's, in the team's
    Role; the lone Llama and Gemma profiles', in the team-less one), and no other owner's
    Role names it."""
    from flows.backends.gke.jobs.options import options_for
    from flows.backends.gke.runtime import GkeRuntime
    from flows.config.loading import load_profile, profile_names
    from flows.config.teams import TEAMS_ENV, TEAMS_FILE
    from tests.support.profiles import required_overrides

    for rule in _secret_rules():
        writes = set(rule["verbs"]) - {"get", "list", "watch"}
        if writes - {"create"}:
            assert rule.get("resourceNames"), rule
        if "create" in writes:
            assert rule["verbs"] == ["create"], "create shares no rule with a scoped verb"
    (update,) = [r for r in _secret_rules() if "update" in r["verbs"]]
    assert update["resources"] == ["secrets"] and update["verbs"] == ["update"]
    assert shipped_replaceable() == frozenset(update["resourceNames"])
    written: dict[str, set[str]] = {}
    monkeypatch.setenv(TEAMS_ENV, str(TEAMS_FILE))
    for name in profile_names():
        for extra in ({}, tracking_overrides()):
            profile = load_profile(name, {**required_overrides(name), **extra}, environ={})
            if profile.gke is not None:
                owner = options_for(profile).secret_owner
                written.setdefault(owner, set()).update(written_secrets(
                    planned_workloads(profile, GkeRuntime(profile)), owner))
    assert written, "no shipped GKE profile writes a Secret"
    assert "team:tutorial" in written, "the shipped teams file's team writes no Secret"
    assert all(len(names) >= 2 for names in written.values()), "a W&B key is missing"
    for owner, names in written.items():  # each owner's flow pods' own Role, no other
        allowed = shipped_replaceable(owner)
        assert allowed is not None and names <= allowed, (
            f"{role_of(owner)} may not replace {sorted(names - (allowed or set()))}")
        others = set().union(*(v for k, v in written.items()
                               if role_of(k) != role_of(owner)))  # team-less share one
        assert not others & allowed, f"{owner}'s Role names {sorted(others & allowed)}"


def test_each_teams_role_grants_the_shared_roles_calls_and_only_its_own_secrets() -> None:
    """A team's Role (deployments/work-pool/teams/TEAM/rbac.yaml, generated) is the shared
    Role the runs above derive, but for the Secrets it may replace, and its account is bound
    to the shared ClusterRole: so every call the backend makes is granted to a team's flow
    pod as to a team-less one, and nothing more."""
    import yaml

    from flows.backends.gke import flow_pools
    from flows.config.teams import TEAMS_FILE, load_teams

    def calls_but_secret_updates(rules: list[dict[str, Any]]) -> set[Call]:
        return granted(rules) - {("", "secrets", "update")}

    shared = calls_but_secret_updates(role_rules(RBAC))
    for team in load_teams(TEAMS_FILE).teams:
        account = flow_pools.flow_account_id(team)
        path = flow_pools.rbac_file(team)
        rules = role_rules(path, name=account)
        assert calls_but_secret_updates(rules) == shared, team
        assert [r for r in rules if ("", "secrets", "update") in granted([r])] == [
            {"apiGroups": [""], "resources": ["secrets"], "verbs": ["update"],
             "resourceNames": flow_pools.team_secrets(
                 team, flow_pools.sources_of(load_teams(TEAMS_FILE).teams[team].profiles))}]
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
        bound = {(d["kind"], d["roleRef"]["name"]) for d in docs if "roleRef" in d
                 and d["subjects"] == [{"kind": "ServiceAccount", "name": account,
                                        "namespace": "default"}]}
        assert bound == {("RoleBinding", account), ("ClusterRoleBinding", "tpurl-flow")}


def test_a_secret_the_role_may_not_replace_fails_naming_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The second train stage with a W&B key whose Secret the Role does not name: the create
    is a 409, the replace a 403, and the stage fails before submitting anything, naming the
    permission and where to add the name."""
    monkeypatch.setenv("HF_TOKEN", fake_hf_token("CANARYrbac"))
    monkeypatch.setenv("OTHER_WANDB_KEY", wandb_key("other"))
    profile = tutorial_profile(**{**tracking_overrides(),
                                  "tracking.wandb.api_key.env": "OTHER_WANDB_KEY"})
    with FakeApiServer(enforcing()) as srv:
        scenario(srv.kube, [(0.05, admit), (0.05, start), (0.1, succeed)])
        first, logger, _, _ = run_stage(srv, "train", tmp_path, profile=profile)
        assert not isinstance(first, StageFailed), (first, logger.lines)
        submitted = len(srv.kube.find("jobsets"))
        second, _, _, _ = run_stage(srv, "train", tmp_path, profile=profile)
        assert len(srv.kube.find("jobsets")) == submitted
    assert isinstance(second, StageFailed), second
    assert second.diagnosis.code == FORBIDDEN_CODE, second.diagnosis
    assert "update secrets (the core API group)" in second.diagnosis.summary
    assert "tpurl plan PROFILE" in second.diagnosis.fix
    assert wandb_key("other") not in str(second)


def test_another_secret_cannot_be_overwritten(server: FakeApiServer) -> None:
    """Through the fake API with the Role enforced as the API server does: an update of a
    Secret the backend does not own is 403; a create of one that exists is 409 (so the
    unscoped create overwrites nothing); the backend's own Secret may be updated."""
    from kubernetes import client as k8s

    from flows.backends.gke.jobs.naming import secret_name

    config = k8s.Configuration(host=server.url)
    core = k8s.CoreV1Api(k8s.ApiClient(config))
    server.kube.create("secrets", "default", {"apiVersion": "v1", "kind": "Secret",
                                              "metadata": {"name": "db-password"},
                                              "stringData": {"value": "s3cret"}})
    before = copy.deepcopy([s for s in server.kube.find("secrets")
                            if s["metadata"]["name"] == "db-password"])
    ours = secret_name("profile:llama3.1-8b-v6e-16", "env:HF_TOKEN")  # a team-less profile's
    attack = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db-password"},
              "stringData": {"value": "attacker"}}
    with pytest.raises(k8s.ApiException) as err:
        core.replace_namespaced_secret("db-password", "default", attack)
    assert err.value.status == 403
    message = json.loads(err.value.body)["message"]
    assert message.startswith('secrets "db-password" is forbidden') and "cannot update" in message
    with pytest.raises(k8s.ApiException) as err:
        core.create_namespaced_secret("default", attack)
    assert err.value.status == 409
    assert [s for s in server.kube.find("secrets")
            if s["metadata"]["name"] == "db-password"] == before  # untouched
    mine = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": ours},
            "stringData": {"value": "hf_x"}}
    core.create_namespaced_secret("default", mine)
    core.replace_namespaced_secret(ours, "default", mine)
    team = secret_name("team:tutorial", "env:HF_TOKEN")  # the team's, in the team's Role
    server.kube.create("secrets", "default", {**attack, "metadata": {"name": team}})
    with pytest.raises(k8s.ApiException) as err:
        core.replace_namespaced_secret(team, "default", {**attack, "metadata": {"name": team}})
    assert err.value.status == 403


def test_the_plan_names_every_secret_a_run_writes_and_whether_the_role_may_replace_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`tpurl plan`: each Secret the run writes (by name, with its source and the jobs that
    write it), the shipped Role's verdict on it, and for a source the Role does not name,
    the fix; never a value (the plan reads no secret). With the shipped teams file: the
    tutorial team's Secrets."""
    from flows.backends.gke.jobs.naming import secret_name
    from flows.config.teams import TEAMS_ENV, TEAMS_FILE
    from flows.operations.plan import build_plan, render_text

    monkeypatch.setenv(TEAMS_ENV, str(TEAMS_FILE))

    tracked = tutorial_profile(**tracking_overrides())
    text = render_text(tracked, build_plan(tracked))
    for source, jobs in (("env:HF_TOKEN", "convert, train, export"),
                         ("env:WANDB_API_KEY", "train")):
        assert (f"  {secret_name('team:tutorial', source)}: {source}, written by {jobs}; the "
                "shipped Role may replace it") in text, text
    keyless = {k: v for k, v in tracking_overrides().items() if ".api_key." not in k}
    other = tutorial_profile(**keyless, **{"tracking.wandb.api_key.secret_block":
                                           "team-wandb-key"})
    text = render_text(other, build_plan(other))
    name = secret_name("team:tutorial", "prefect-secret:team-wandb-key")
    assert (f"  {name}: prefect-secret:team-wandb-key, written by train; NOT in the Role's "
            f"secrets update rule: add {name} to its resourceNames") in text, text
