"""Two teams on one namespace: each team's flow pod acts as that team only
(flows/backends/gke/flow_pools.py, docs/decisions/0039-a-flow-identity-per-team.md).

The attacks, made with what the operator applies for the two teams (each team's pool
template and Role, each team's `tpurl flow-identity` script): team B's flow pod, as the
identity its pool's template names, replaces team A's HF token Secret through the fake API
server enforcing the Role bound to that account as the API server does
(tests/fakes/kube_api/rbac.py), and writes team A's bucket under the bindings both scripts
made through the fake gcloud (tests/fakes/cloud/pod_identity.py ``may_write``). Before, one
pool ran every team's flow pod as ``tpurl-flow``, whose one Role named every team's Secrets
and whose Google account both scripts granted their bucket: both attacks succeeded.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kubernetes import client as k8s

from flows.backends.gke import flow_pools
from flows.backends.gke.identity_setup import setup_commands
from flows.backends.gke.jobs.naming import secret_name
from flows.config.profile import Profile
from tests.fakes.cloud import fake_path
from tests.fakes.cloud.pod_identity import may_write
from tests.fakes.kube_api import FakeApiServer, FakeKube
from tests.support.profiles import smoke_profile, tutorial_profile

A_BUCKET, B_BUCKET = "team-a-ckpts", "team-b-ckpts"
IMAGES = "images-proj-7/shared"  # team B's image repository: another project's
BASE = json.loads(flow_pools.BASE_TEMPLATE.read_text())


def _pool(team: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """What the operator applies for ``team``: its pool's base job template and its Role
    (with the account, bindings and ClusterRole binding)."""
    return flow_pools.team_template(BASE, team), flow_pools.team_rbac(team)


def _flow_pod(template: dict[str, Any]) -> dict[str, Any]:
    return template["job_configuration"]["job_manifest"]["spec"]["template"]["spec"]


def _rules_of(account: str, docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    """The rules of every ``kind`` bound to ``account`` by the documents' bindings."""
    binding = {"Role": "RoleBinding", "ClusterRole": "ClusterRoleBinding"}[kind]
    names = {d["roleRef"]["name"] for d in docs if d["kind"] == binding
             and any(s["name"] == account for s in d["subjects"])}
    return [r for d in docs if d["kind"] == kind and d["metadata"]["name"] in names
            for r in d["rules"]]


def _as_flow_pod_of(team: str, shared: list[dict[str, Any]]) -> FakeKube:
    """The fake API server authorising as team's flow pod: its template's account, the
    rules bound to it (a ClusterRole of the shared file)."""
    template, docs = _pool(team)
    account = _flow_pod(template)["serviceAccountName"]
    kube = FakeKube()
    kube.rbac_user = f"system:serviceaccount:default:{account}"
    kube.rbac_rules = _rules_of(account, docs, "Role")
    kube.rbac_cluster_rules = _rules_of(account, [*docs, *shared], "ClusterRole")
    return kube


def _secret(name: str, value: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name},
            "stringData": {"value": value}}


def test_team_bs_flow_pod_cannot_replace_or_read_team_as_secrets(two_teams: None) -> None:
    import yaml

    shared = [d for d in yaml.safe_load_all(flow_pools.SHARED_RBAC.read_text()) if d]
    a_token = secret_name("team:team-a", "env:HF_TOKEN")
    b_token = secret_name("team:team-b", "env:HF_TOKEN")
    with FakeApiServer(_as_flow_pod_of("team-b", shared)) as server:
        server.kube.create("secrets", "default", _secret(a_token, "hf_team_a_value"))
        before = server.kube.find("secrets")
        core = k8s.CoreV1Api(k8s.ApiClient(k8s.Configuration(host=server.url)))
        for attack in (lambda: core.replace_namespaced_secret(
                           a_token, "default", _secret(a_token, "hf_team_b_value")),
                       lambda: core.read_namespaced_secret(a_token, "default")):
            with pytest.raises(k8s.ApiException) as refused:
                attack()
            assert refused.value.status == 403
        assert server.kube.find("secrets") == before  # team A's Secret untouched
        core.create_namespaced_secret("default", _secret(b_token, "hf_team_b_value"))
        core.replace_namespaced_secret(b_token, "default", _secret(b_token, "hf_team_b_2"))


def test_each_teams_flow_pod_mounts_its_own_token_and_runs_as_its_own_account(
        two_teams: None) -> None:
    pods = {team: _flow_pod(_pool(team)[0]) for team in ("team-a", "team-b")}
    accounts = {team: pod["serviceAccountName"] for team, pod in pods.items()}
    assert accounts == {"team-a": "tpurl-flow-team-a", "team-b": "tpurl-flow-team-b"}
    refs = {team: {e["valueFrom"]["secretKeyRef"]["name"] for c in pod["containers"]
                   for e in c["env"] if "valueFrom" in e} for team, pod in pods.items()}
    for team in pods:  # token, W&B key and the key that seals the dispatcher's records
        assert refs[team] == {f"tpurl-team-{team}-hf-token", f"tpurl-team-{team}-wandb-api-key",
                              f"tpurl-team-{team}-dispatch-key"}
    assert not refs["team-a"] & refs["team-b"]  # no Secret is read by both teams' pods
    roles = {team: {n for r in _rules_of(accounts[team], _pool(team)[1], "Role")
                    for n in r.get("resourceNames") or []} for team in accounts}
    assert roles["team-a"] and roles["team-b"] and not roles["team-a"] & roles["team-b"]


def _bindings(fake_cloud: Path, scripts: list[list[str]]) -> list[tuple[str, str, str]]:
    """Run the bucket grants of each `tpurl flow-identity` script through the fake gcloud;
    the bucket bindings it recorded, as (resource, member, role)."""
    env = {**os.environ, "TPURL_FAKE_CLOUD": str(fake_cloud),
           "PATH": fake_path()}
    for script in scripts:
        grants = [ln for ln in script if ln.startswith("gcloud storage buckets add-iam")]
        assert grants
        subprocess.run(["sh", "-ec", "\n".join(grants)], env=env, check=True)
    state = json.loads((fake_cloud / "state.json").read_text())
    return [(f"bucket {bucket}", member, binding["role"])
            for bucket, policy in state["bucket_policies"].items()
            for binding in policy["bindings"] for member in binding["members"]]


def _google_account(team: str, profile: Profile) -> str:
    """The Google account team's flow pod acts as: its account's Workload Identity
    annotation (rbac), with the project filled in."""
    template, docs = _pool(team)
    account = _flow_pod(template)["serviceAccountName"]
    (sa,) = [d for d in docs if d["kind"] == "ServiceAccount"
             and d["metadata"]["name"] == account]
    assert profile.gke is not None
    return sa["metadata"]["annotations"]["iam.gke.io/gcp-service-account"].replace(
        "PROJECT", profile.gke.project)


def test_team_bs_flow_identity_holds_its_own_bucket_only(two_teams: None,
                                                          tmp_path: Path) -> None:
    a = tutorial_profile(**{"gke.bucket": A_BUCKET})
    b = smoke_profile(**{"gke.bucket": B_BUCKET})
    bindings = _bindings(tmp_path, [setup_commands(a, "runtime", team="team-a"),
                                    setup_commands(b, "runtime", team="team-b")])
    for team, profile, own, other in (("team-a", a, A_BUCKET, B_BUCKET),
                                      ("team-b", b, B_BUCKET, A_BUCKET)):
        member = f"serviceAccount:{_google_account(team, profile)}"
        assert may_write(member, own, bindings), (team, bindings)
        assert not may_write(member, other, bindings), (team, bindings)


def test_the_scripts_bind_each_teams_kubernetes_account_to_its_google_account(
        two_teams: None) -> None:
    """The team's script, as `tpurl flow-identity` prints it for a profile of the team: the
    team's accounts bound, and its own ledger bucket granted to read and create in."""
    a = tutorial_profile(**{"gke.bucket": A_BUCKET})
    assert a.gke is not None
    script = "\n".join(setup_commands(a, "runtime", team="team-a",
                                      ledger_root="gs://team-a-ledger/spend"))
    for role in ("roles/storage.objectViewer", "roles/storage.objectCreator"):
        assert (f"gcloud storage buckets add-iam-policy-binding gs://team-a-ledger --member="
                f"serviceAccount:tpurl-flow-team-a@{a.gke.project}.iam.gserviceaccount.com "
                f"--role={role}") in script
    assert (f"gcloud iam service-accounts add-iam-policy-binding "
            f"tpurl-flow-team-a@{a.gke.project}.iam.gserviceaccount.com") in script
    assert "[default/tpurl-flow-team-a]" in script
    assert "tpurl-flow@" not in script


def test_flow_identity_prints_the_profiles_teams_account(
        two_teams: None, capsys: pytest.CaptureFixture[str]) -> None:
    from flows.cli import main
    from tests.support.profiles import SMOKE, SMOKE_REQUIRED

    assert main(["flow-identity", SMOKE, "--identity", "runtime",
                 *[f"--set={k}={v}" for k, v in SMOKE_REQUIRED.items()]]) == 0
    script = capsys.readouterr().out
    assert "team team-b's flow pods (pool tpurl-kubernetes-team-b" in script
    assert "--member=serviceAccount:tpurl-flow-team-b@" in script
    assert "tpurl-flow@" not in script and "tpurl-flow-team-a" not in script


@pytest.mark.parametrize(("team", "expected"), [
    ("a" * 19, "tpurl-flow-" + "a" * 19),                      # 30: fits as it is
    ("research-vision-x", "tpurl-flow-research-vision-x"),
])
def test_an_account_id_that_fits_is_the_team_name(team: str, expected: str) -> None:
    assert flow_pools.flow_account_id(team) == expected
    assert len(expected) <= flow_pools.ACCOUNT_ID_MAX


def test_a_long_team_name_gets_a_short_deterministic_account_id() -> None:
    import re

    long_names = ["a" * 20, "b" * 58, "research-" + "x" * 11, "research-" + "x" * 12]
    ids = [flow_pools.flow_account_id(n) for n in long_names]
    for team, got in zip(long_names, ids, strict=True):
        assert 6 <= len(got) <= 30, got
        assert re.fullmatch(r"[a-z][a-z0-9-]*[a-z0-9]", got), got
        assert got == flow_pools.flow_account_id(team)  # deterministic
    assert len(set(ids)) == len(ids)
    assert flow_pools.flow_account_id(None) == "tpurl-flow"


def test_shipped_team_pools_are_what_the_generator_writes() -> None:
    """deployments/work-pool/teams/TEAM/ for every team of the shipped teams file, as
    `python -m flows.backends.gke.flow_pools` writes them: a hand edit, a change of the
    shared template or Role not carried over, or a team added without its pool fails here."""
    from flows.config.teams import TEAMS_FILE, load_teams

    teams = {name: team.profiles for name, team in load_teams(TEAMS_FILE).teams.items()}
    assert teams, "the shipped teams file names no team"
    assert flow_pools.drift(teams) == [], ("run `python -m flows.backends.gke.flow_pools` "
                                           "with TPURL_TEAMS_FILE unset")


# one ledger root for both teams, as the shipped file has, under a prefix of two levels
LEDGER = "gs://shared-ledger/spend/tpurl"


def _ledger_policy(fake_cloud: Path, scripts: list[list[str]]) -> dict[str, Any]:
    """Run the ledger part of each `tpurl flow-identity` script (from its comment to the
    condition file's removal, as `sh` runs it) through the fake gcloud; the ledger bucket's
    policy it recorded."""
    env = {**os.environ, "TPURL_FAKE_CLOUD": str(fake_cloud),
           "PATH": fake_path()}
    for script in scripts:
        start = next(i for i, ln in enumerate(script) if "spend ledger" in ln)
        part = script[start:next(i for i, ln in enumerate(script) if ln.startswith("rm -f"))
                      + 1]
        subprocess.run(["sh", "-ec", "\n".join(part)], env=env, check=True)
    state = json.loads((fake_cloud / "state.json").read_text())
    return state["bucket_policies"]["shared-ledger"]


def test_a_teams_flow_reads_and_adds_to_its_own_spend_only(two_teams: None,
                                                           tmp_path: Path) -> None:
    """Teams sharing a ledger bucket: team A's flow, as the identity its script grants, can
    neither file an entry among team B's spend (it would replace B's estimate, or take B's
    places in the month's order) nor read or list B's entries; each writes, reads and lists
    its own, as the run does (flows/core/spend_ledger.py: entries created if free, the
    month listed by its prefix). Before, both scripts granted the whole bucket."""
    import yaml

    from flows.backends.gke.identity_setup import ledger_condition
    from flows.core.spend_ledger import month_dir
    from tests.fakes.cloud.iam_conditions import allowed

    a, b = tutorial_profile(), smoke_profile()
    policy = _ledger_policy(tmp_path, [
        setup_commands(a, "runtime", team="team-a", ledger_root=LEDGER),
        setup_commands(b, "runtime", team="team-b", ledger_root=LEDGER)])

    def months(team: str) -> str:  # the month's objects' prefix, as read_month lists it
        return month_dir(LEDGER, team, "2026-12").removeprefix("gs://shared-ledger/") + "/"

    for team, profile, other in (("team-a", a, "team-b"), ("team-b", b, "team-a")):
        member = f"serviceAccount:{_google_account(team, profile)}"
        for whose, expected in ((team, True), (other, False)):
            entry = months(whose) + "runs/r-1/train-00000-estimate.json"
            place = months(whose) + "order/00000.json"
            for permission, name in (("storage.objects.create", entry),
                                     ("storage.objects.create", place),
                                     ("storage.objects.get", entry)):
                assert allowed(policy, member, permission, "shared-ledger", name) is expected, \
                    (team, permission, name, policy)
            assert allowed(policy, member, "storage.objects.list", "shared-ledger",
                           list_prefix=months(whose)) is expected, (team, whose, policy)
        assert not allowed(policy, member, "storage.objects.list", "shared-ledger")  # all
        assert not allowed(policy, member, "storage.objects.create", "shared-ledger",
                           "tpurl-spend/a-new-team/2026-12/order/00000.json")
    # what the fake read from the condition file is what a YAML parser reads (gcloud's)
    [script] = [setup_commands(a, "runtime", team="team-a", ledger_root=LEDGER)]
    printed = subprocess.run(["sh", "-ec", next(ln for ln in script if ln.startswith("printf"))
                              .replace('> "$condition"', "")], capture_output=True,
                             text=True, check=True).stdout
    assert yaml.safe_load(printed) == {"title": "tpurl ledger of team team-a",
                                       "expression": ledger_condition(LEDGER, "team-a")}


def _naming_secret(profile: Profile, secret: str) -> Profile:
    """``profile`` with its HF token in the Secret Manager secret ``secret``."""
    from flows.config.secret_ref import SecretRef

    model = profile.model.model_copy(update={"hf_token": SecretRef(gcp_secret=secret)})
    return profile.model_copy(update={"model": model})


def test_a_teams_flow_may_read_its_own_secret_manager_secrets_only(two_teams: None,
                                                                   tmp_path: Path) -> None:
    """Each team keeps its HF token in Secret Manager: the script of each team grants its
    flow account the accessor role on the secrets its profile names, each on its own, and
    nothing on the project, so team B's flow cannot read team A's token (a project grant,
    which the fix text once left open, would give every team's flow every secret)."""
    a = _naming_secret(tutorial_profile(), "team-a-hf-token")
    b = _naming_secret(smoke_profile(), "team-b-hf-token")
    env = {**os.environ, "TPURL_FAKE_CLOUD": str(tmp_path),
           "PATH": fake_path()}
    for profile, team in ((a, "team-a"), (b, "team-b")):
        grants = [ln for ln in setup_commands(profile, "runtime", team=team)
                  if ln.startswith("gcloud secrets ")]
        assert len(grants) == 1, grants
        subprocess.run(["sh", "-ec", "\n".join(grants)], env=env, check=True)
    state = json.loads((tmp_path / "state.json").read_text())
    assert not any("secretmanager" in b["role"] for b in
                   state.get("project_policy", {}).get("bindings", []))
    readers = {name: {m for bnd in policy["bindings"] for m in bnd["members"]
                      if bnd["role"] == "roles/secretmanager.secretAccessor"}
               for name, policy in state["secret_policies"].items()}
    assert a.gke is not None and b.gke is not None
    assert readers == {  # each in its profile's project, where the run reads it
        f"projects/{a.gke.project}/secrets/team-a-hf-token":
            {f"serviceAccount:{_google_account('team-a', a)}"},
        f"projects/{b.gke.project}/secrets/team-b-hf-token":
            {f"serviceAccount:{_google_account('team-b', b)}"}}
    # a profile naming no Secret Manager secret gets no such line, nor its comment
    assert not [ln for ln in setup_commands(tutorial_profile(), "runtime", team="team-a")
                if "Secret Manager" in ln or ln.startswith("gcloud secrets")]


def test_the_plan_names_each_teams_own_flow_pod(two_teams: None) -> None:
    """`tpurl plan` of a profile of each team: the team's pool, accounts, Role and HF token
    Secret, none of the other team's."""
    from flows.operations.plan import build_plan, render_text

    texts = {}
    for team, profile in (("team-a", tutorial_profile()), ("team-b", smoke_profile())):
        text = render_text(profile, build_plan(profile))
        assert profile.gke is not None
        assert (f"The flow pod (team {team}'s): pool tpurl-kubernetes-{team}, Kubernetes "
                f"service account tpurl-flow-{team} bound to tpurl-flow-{team}@"
                f"{profile.gke.project}.iam.gserviceaccount.com") in text, text
        assert f"HF_TOKEN from the Secret tpurl-team-{team}-hf-token" in text
        texts[team] = text
    assert "tpurl-flow-team-b" not in texts["team-a"]
    assert "tpurl-flow-team-a" not in texts["team-b"]


@given(st.from_regex(r"[a-z0-9]([a-z0-9-]{0,56}[a-z0-9])?", fullmatch=True))
def test_every_team_name_gives_a_valid_google_account_id(team: str) -> None:
    """Any name the teams file accepts (an RFC 1123 label of at most 58 characters,
    flows/config/teams.py) gives a Google account id: 6 to 30 characters, a letter first,
    lowercase letters, digits and '-', no '-' last; the name itself while it fits."""
    import re

    from flows.config.teams import team_name_problem

    assert team_name_problem(team) is None
    got = flow_pools.flow_account_id(team)
    assert re.fullmatch(r"[a-z][a-z0-9-]{4,28}[a-z0-9]", got), got
    assert got == f"tpurl-flow-{team}" or len(f"tpurl-flow-{team}") > 30


def test_a_drifted_team_file_is_named_and_writing_again_fixes_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The generator's --check names a hand-edited file and a team the file no longer
    names; writing again (what the fix says to run) restores the one and leaves the other,
    which it did not just write, for the operator to remove."""
    monkeypatch.setattr(flow_pools, "TEAM_DIR", tmp_path / "teams")
    teams = {"team-a": ["qwen3-30b-a3b-v6e-32"]}
    assert flow_pools.drift(teams) != []  # nothing written yet
    flow_pools.write({**teams, "team-b": []})
    assert flow_pools.drift(teams) == [
        f"{flow_pools.shown(tmp_path / 'teams' / 'team-b')} is of no team of the teams file"]
    rbac = flow_pools.rbac_file("team-a")
    rbac.write_text(rbac.read_text().replace("verbs:\n  - update", "verbs:\n  - update\n  - get"))
    assert [p.split()[0] for p in flow_pools.drift(teams)] == [
        flow_pools.shown(rbac), flow_pools.shown(tmp_path / "teams" / "team-b")]
    flow_pools.write(teams)
    assert flow_pools.drift(teams) == [
        f"{flow_pools.shown(tmp_path / 'teams' / 'team-b')} is of no team of the teams file"]
    assert (tmp_path / "teams" / "team-b").is_dir()


def test_each_teams_whole_script_runs_and_a_second_run_changes_nothing(two_teams: None,
                                                                       tmp_path: Path) -> None:
    """What an operator pipes to ``sh``, both teams' and the infra identity's, run whole
    through the fake gcloud, which refuses to create what exists and to grant on what does
    not: every account, bucket and repository the grants sit on is made first, where the
    profile says (team B's images in a repository of another project); run again, every
    line finds its resource and the cloud is unchanged."""
    a = tutorial_profile(**{"gke.bucket": A_BUCKET})
    b = smoke_profile(**{"gke.bucket": B_BUCKET,
                         "image.repository": f"europe-west4-docker.pkg.dev/{IMAGES}/post-training"})
    assert a.gke is not None and b.gke is not None
    scripts = [setup_commands(a, "both", team="team-a", ledger_root="gs://shared-ledger/spend"),
               setup_commands(b, "runtime", team="team-b", ledger_root="gs://shared-ledger/spend")]
    env = {**os.environ, "TPURL_FAKE_CLOUD": str(tmp_path), "PATH": fake_path()}

    def run_all() -> dict[str, Any]:
        for script in scripts:
            done = subprocess.run(["sh", "-c", "\n".join(script)], env=env, text=True,
                                  capture_output=True, check=False)
            assert done.returncode == 0, done.stderr
        state: dict[str, Any] = json.loads((tmp_path / "state.json").read_text())
        return state

    first = run_all()
    project = a.gke.project
    accounts = first["service_accounts"]
    assert set(accounts) == {f"tpurl-{n}@{project}.iam.gserviceaccount.com"
                             for n in ("infra", "flow-team-a", "flow-team-b")}
    for team, profile, bucket in (("team-a", a, A_BUCKET), ("team-b", b, B_BUCKET)):
        assert profile.gke is not None
        email = f"tpurl-flow-{team}@{project}.iam.gserviceaccount.com"
        assert accounts[email]["displayName"] == f"tpurl flow ({flow_pools.pool_name(team)})"
        assert first["buckets"][bucket] == {"project": project, "location": profile.gke.region,
                                            "uniform": True}
        member = (f"serviceAccount:{project}.svc.id.goog[{profile.gke.namespace}/"
                  f"{flow_pools.flow_account_id(team)}]")
        assert accounts[email]["bindings"] == [{"role": "roles/iam.workloadIdentityUser",
                                                "members": [member]}]
    readers = {name: ({r["format"]}, {m for binding in r["bindings"] for m in binding["members"]})
               for name, r in first["repositories"].items()}
    assert readers == {
        f"projects/{project}/locations/{a.gke.region}/repositories/tpurl": (
            {"docker"}, {f"serviceAccount:tpurl-flow-team-a@{project}.iam.gserviceaccount.com"}),
        f"projects/{IMAGES.split('/')[0]}/locations/europe-west4/repositories/shared": (
            {"docker"}, {f"serviceAccount:tpurl-flow-team-b@{project}.iam.gserviceaccount.com"})}
    def policies(state: dict[str, Any]) -> dict[str, Any]:  # grant_times: when, not what
        return {k: v for k, v in state.items() if k != "grant_times"}

    assert policies(run_all()) == policies(first)
    # the second run is quiet because each create is guarded, not because the fake forgives
    create = next(ln for ln in scripts[1] if "service-accounts create" in ln).split(" || ")[1]
    again = subprocess.run(["sh", "-c", create], env=env, capture_output=True, text=True,
                           check=False)
    assert again.returncode == 1 and "ALREADY_EXISTS" in again.stderr


def test_a_docker_built_image_in_another_registry_is_neither_created_nor_granted(
        two_teams: None, tmp_path: Path) -> None:
    """A team that builds with its own Docker daemon and pushes outside Artifact Registry:
    its script makes no Cloud Build staging bucket and touches no repository (the registry is
    used as it is), yet runs whole; the infra identity's account is made once with its title."""
    a = tutorial_profile(**{"gke.bucket": A_BUCKET, "image.builder": "docker",
                            "image.repository": "registry.example.com/team-a/post-training"})
    assert a.gke is not None
    script = setup_commands(a, team="team-a")
    assert script == setup_commands(a, "both", team="team-a")
    env = {**os.environ, "TPURL_FAKE_CLOUD": str(tmp_path), "PATH": fake_path()}
    done = subprocess.run(["sh", "-c", "\n".join(script)], env=env, text=True,
                          capture_output=True, check=False)
    assert done.returncode == 0, done.stderr
    state = json.loads((tmp_path / "state.json").read_text())
    assert set(state["buckets"]) == {A_BUCKET} and "repositories" not in state
    assert set(state["bucket_policies"]) == {A_BUCKET}
    infra = state["service_accounts"][f"tpurl-infra@{a.gke.project}.iam.gserviceaccount.com"]
    assert infra["displayName"] == "tpurl infra (cluster deploy, IAM; operator only)"
    assert not any("gs:// " in line or "artifacts" in line for line in script)
