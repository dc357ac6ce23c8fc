"""The flow pod's Role (deployments/work-pool/rbac.yaml) is derived from the code: the GKE
backend runs against the fake API with that Role enforced the way the API server enforces it
(tests/fakes/kube_api/rbac.py), every request's (verb, group, resource) is recorded, and the
Role must grant each one and nothing more (issue 18.4: without core ``events`` list/watch
every autoscaler poll was a 403 and a stockout looked like an RBAC failure).

What the scenarios below cover is checked against the source: every Kubernetes client call
in flows/backends/gke must be one whose verb the recorded calls contain, so a new call that
no scenario exercises fails here instead of on a real cluster. Pre-flight's cluster reads
(flows/backends/gke/infra/cloud.py ``RestGoogleApis._kube``: controller Deployments, the
JobSet CRD, Kueue queues and flavors) go with the Google identity's token, authorised by
IAM (roles/container.viewer), not by this Role, so they are not part of it.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from flows.core.failures import StageFailed
from flows.core.layout import Layout
from flows.core.programs import convert_workload
from flows.core.storage import file_uri
from tests.fakes.gke_backend import ListLogger, make_backend, run_stage
from tests.fakes.kube_api import FakeApiServer, FakeKube
from tests.fakes.kube_api.rbac import granted, role_rules
from tests.fakes.kube_api.scenarios import (
    admit,
    say,
    scenario,
    start,
    succeed,
    worker_crashes,
)
from tests.support.profiles import capacity_overrides, fake_hf_token, tutorial_profile

ROOT = Path(__file__).resolve().parents[3]
RBAC = ROOT / "deployments/work-pool/rbac.yaml"
GKE_SOURCE = ROOT / "flows/backends/gke"
# kubernetes client method prefix → the RBAC verb its request carries (requestinfo.go);
# a list_* call feeds a list+watch cache (flows/backends/gke/watch/stream.py), so both.
METHOD_VERBS = {"list": {"list", "watch"}, "read": {"get"}, "get": {"get"},
                "create": {"create"}, "replace": {"update"}, "patch": {"patch"},
                "delete": {"delete"}}
CLIENT_CALL = re.compile(r"\.(?:core|custom)\.(list|read|get|create|replace|patch|delete)_"
                         r"(namespaced_\w+|cluster_custom_object\w*|node\w*)")
CORE_RESOURCES = {"namespaced_pod": "pods", "namespaced_pod_log": "pods/log",
                  "namespaced_event": "events", "namespaced_secret": "secrets", "node": "nodes",
                  "namespaced_config_map": "configmaps"}


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeApiServer]:
    monkeypatch.setenv("HF_TOKEN", fake_hf_token("CANARYrbac"))
    kube = FakeKube()
    kube.rbac_rules = role_rules(RBAC)
    kube.rbac_cluster_rules = role_rules(RBAC, kind="ClusterRole")
    with FakeApiServer(kube) as srv:
        yield srv


def _exercise(server: FakeApiServer, tmp_path: Path) -> None:
    """Every path of the backend that talks to the cluster: submit and watch to success,
    rerun (Secret exists → update; JobSet exists → read, reattach), the leftover check, and an
    interrupted stage (delete)."""
    kube = scenario(server.kube, [(0.1, admit), (0.05, start), (0.05, say("step 1")),
                                  (0.1, succeed)])
    for _ in range(2):
        outcome, logger, _, backend = run_stage(server, "train", tmp_path)
        assert not isinstance(outcome, StageFailed), (outcome, logger.lines)
    assert backend.clear_leftovers("train", str(tmp_path / "out")) == 0

    # a spend cap on a pool that scales from zero: the meter lists and watches the run's TPU
    # nodes, cluster-scoped (watch/tpu_nodes.py)
    capped = tutorial_profile(**capacity_overrides("on-demand"),
                              **{"gke.max_usd_per_run": "2000"})
    scenario(kube, [(0.1, admit), (0.05, start), (0.1, succeed)])
    outcome, logger, _, _ = run_stage(server, "train", tmp_path, profile=capped)
    assert not isinstance(outcome, StageFailed), (outcome, logger.lines)

    # the evaluation ships its program as an immutable ConfigMap: created, then a 409 on rerun
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


def test_the_role_grants_every_call_the_backend_makes_and_nothing_more(
        server: FakeApiServer, tmp_path: Path) -> None:
    _exercise(server, tmp_path)
    role = granted(role_rules(RBAC)) | granted(role_rules(RBAC, kind="ClusterRole"))
    calls = server.kube.calls
    assert calls - role == set(), f"the Role lacks {sorted(calls - role)}"
    assert role - calls == set(), f"the Role grants unused {sorted(role - calls)}"
    # and the scenarios reach every client call in the source
    used = {(m[1], m[2]) for path in sorted(GKE_SOURCE.rglob("*.py"))
            for m in CLIENT_CALL.finditer(path.read_text())}
    assert used, "no Kubernetes client calls found: the pattern is stale"
    verbs = {verb for verb, _, _ in server.kube.calls}
    for prefix, what in sorted(used):
        assert METHOD_VERBS[prefix] <= verbs, f"{prefix}_{what}: no scenario makes this call"
        if (resource := CORE_RESOURCES.get(what)) is not None:
            assert {(v, "", resource) for v in METHOD_VERBS[prefix]} & server.kube.calls, (
                f"{prefix}_{what}: no scenario reaches {resource}")
        else:
            assert what == "namespaced_custom_object", f"{prefix}_{what}: map its resource here"


def _secret_rules() -> list[dict]:
    return [r for r in role_rules(RBAC) if set(r.get("resources") or []) & {"secrets",
                                                                            "configmaps"}]


def test_no_write_on_secrets_or_configmaps_is_unscoped_but_create() -> None:
    """Issue 37.6: every write verb on secrets and configmaps names the objects it may touch,
    except ``create``, which RBAC cannot limit by name (the name is in the body: requestinfo
    leaves it empty, and ResourceNameMatches never matches an empty name against a list) and
    which cannot overwrite (409 AlreadyExists). The names are the backend's own."""
    from flows.backends.gke.jobs.naming import secret_name
    from flows.config.loading import load_profile, profile_names
    from tests.support.profiles import required_overrides

    for rule in _secret_rules():
        writes = set(rule["verbs"]) - {"get", "list", "watch"}
        if writes - {"create"}:
            assert rule.get("resourceNames"), rule
        if "create" in writes:
            assert rule["verbs"] == ["create"], "create shares no rule with a scoped verb"
    (update,) = [r for r in _secret_rules() if "update" in r["verbs"]]
    assert update["resources"] == ["secrets"] and update["verbs"] == ["update"]
    shipped = [load_profile(name, required_overrides(name), environ={})
               for name in profile_names()]
    gke = [p for p in shipped if p.gke is not None]
    assert gke, "no shipped GKE profile"
    for profile in gke:  # every shipped GKE profile's Secret is one the Role may update
        assert profile.model.hf_token is not None
        assert secret_name(profile.model.hf_token.describe()) in update["resourceNames"]


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
    ours = secret_name("env:HF_TOKEN")
    attack = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db-password"},
              "stringData": {"value": "attacker"}}
    with pytest.raises(k8s.ApiException) as err:
        core.replace_namespaced_secret("db-password", "default", attack)
    assert err.value.status == 403
    import json

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
