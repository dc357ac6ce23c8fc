"""A token the flow cannot read fails at the flow's validation, with a fix for where it runs."""

from __future__ import annotations

import random
import string

import pytest

from flows.config import ProfileError
from flows.config.profile import SecretRef
from flows.core.redaction import REDACTED, redact
from flows.core.secrets import K8S_SECRET, SecretTooShort, require_secrets, resolve
from tests.support.profiles import tutorial_profile


def test_a_missing_token_is_a_profile_error_naming_the_field() -> None:
    with pytest.raises(ProfileError) as err:
        require_secrets(tutorial_profile(), environ={})
    (issue,) = err.value.issues
    assert issue.field == "model.hf_token" and "HF_TOKEN is not set" in issue.fix


def test_in_a_kubernetes_pod_the_fix_names_the_secret_the_pool_maps() -> None:
    with pytest.raises(ProfileError) as err:
        require_secrets(tutorial_profile(), environ={"KUBERNETES_SERVICE_HOST": "10.0.0.1"})
    assert f"kubectl create secret generic {K8S_SECRET}" in err.value.issues[0].fix


def test_in_a_teams_kubernetes_pod_the_fix_names_the_teams_secret(
        tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A profile of a team runs in the team's pool, which maps the team's own Secret
    (deployments/work-pool/teams/TEAM/kubernetes-base-job-template.json)."""
    import json

    from flows.backends.gke.flow_pools import team_template, template_file
    from tests.support.profiles import TUTORIAL

    teams = tmp_path / "teams.yaml"
    teams.write_text(f"teams:\n  team-a: {{usd_per_month: 1000, profiles: [{TUTORIAL}]}}\n")
    monkeypatch.setenv("TPURL_TEAMS_FILE", str(teams))
    with pytest.raises(ProfileError) as err:
        require_secrets(tutorial_profile(), environ={"KUBERNETES_SERVICE_HOST": "10.0.0.1"})
    assert "kubectl create secret generic tpurl-team-team-a-hf-token " in err.value.issues[0].fix
    mapped = team_template(json.loads(template_file(None).read_text()), "team-a")
    env = mapped["job_configuration"]["job_manifest"]["spec"]["template"]["spec"][
        "containers"][0]["env"]
    assert {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {
        "name": "tpurl-team-team-a-hf-token", "key": "value", "optional": True}}} in env


def test_a_present_token_passes_and_is_not_kept() -> None:
    profile = tutorial_profile()
    assert require_secrets(profile, environ={"HF_TOKEN": "hf_" + "x" * 34}) is None


def test_the_kubernetes_pool_maps_the_secret_to_the_variable() -> None:
    import json

    from flows.common.paths import REPO_ROOT

    template = json.loads((REPO_ROOT / "deployments/work-pool/"
                           "kubernetes-base-job-template.json").read_text())
    env = template["job_configuration"]["job_manifest"]["spec"]["template"]["spec"][
        "containers"][0]["env"]
    assert {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {
        "name": K8S_SECRET, "key": "value", "optional": True}}} in env


@pytest.mark.parametrize("value", ["x", "abc", "ab\n", "  abc  "])
def test_a_token_too_short_to_redact_is_refused_naming_the_field(value: str) -> None:
    """The registry cannot take a 1-3 character value out of the logs without blanking
    ordinary words, and no real token is that short: refused before anything runs, never
    used unredacted."""
    with pytest.raises(ProfileError) as err:
        require_secrets(tutorial_profile(), environ={"HF_TOKEN": value})
    (issue,) = err.value.issues
    assert issue.field == "model.hf_token" and issue.category == "config/secret-too-short"
    assert "too short" in issue.fix and "env:HF_TOKEN" in issue.problem
    # the value itself is not in the message (only its length): another of that length
    # reads the same
    other = "".join("q" if c.strip() else c for c in value)
    with pytest.raises(ProfileError) as again:
        require_secrets(tutorial_profile(), environ={"HF_TOKEN": other})
    assert again.value.issues[0].render() == issue.render()
    with pytest.raises(SecretTooShort):
        resolve(SecretRef(env="HF_TOKEN"), {"HF_TOKEN": value})


def test_the_shortest_accepted_token_is_redacted() -> None:
    token = "".join(random.SystemRandom().choice(string.ascii_letters) for _ in range(4))
    assert resolve(SecretRef(env="HF_TOKEN"), {"HF_TOKEN": token}) == token
    assert redact(f"token={token}.") == f"token={REDACTED}."


def test_the_kubernetes_pool_maps_the_wandb_key_too_and_its_fix_names_that_secret() -> None:
    """A W&B key referenced as {env: WANDB_API_KEY} had no way into the Kubernetes pool's
    flow pod: its start check failed with "export WANDB_API_KEY", which a pod cannot do."""
    import json

    from flows.common.paths import REPO_ROOT
    from flows.core.secrets import POD_SECRETS
    from flows.integrations.preflight import integration_issues
    from tests.support.profiles import tutorial_profile as profile_with

    template = json.loads((REPO_ROOT / "deployments/work-pool/"
                           "kubernetes-base-job-template.json").read_text())
    env = template["job_configuration"]["job_manifest"]["spec"]["template"]["spec"][
        "containers"][0]["env"]
    for name, secret in POD_SECRETS.items():
        assert {"name": name, "valueFrom": {"secretKeyRef": {
            "name": secret, "key": "value", "optional": True}}} in env
    wandb = profile_with(**{"tracking.wandb.project": "p",
                            "tracking.wandb.api_key.env": "WANDB_API_KEY"})
    pod = {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}
    (issue,) = [i for i in integration_issues(wandb, pod) if i.field == "tracking.wandb.api_key"]
    assert issue.fix.startswith("this flow runs in a Kubernetes pod: create the Secret once in "
                                "the work pool's namespace (kubectl create secret generic "
                                "tpurl-wandb-api-key --from-literal=value=$WANDB_API_KEY)"), issue
    # outside a pod, the plain fix stands
    (outside,) = [i for i in integration_issues(wandb, {}) if i.field == "tracking.wandb.api_key"]
    assert "Kubernetes" not in outside.fix


def test_in_a_pod_a_variable_the_pool_does_not_map_is_told_to_use_another_source() -> None:
    from flows.core.secrets import pod_secret_fix

    fix = pod_secret_fix(SecretRef(env="MY_KEY"), "tracking.wandb.api_key",
                         {"KUBERNETES_SERVICE_HOST": "10.0.0.1"})
    assert fix is not None and "work pool sets no MY_KEY" in fix and "secret_block" in fix
    assert pod_secret_fix(SecretRef(env="MY_KEY"), "f", {}) is None
