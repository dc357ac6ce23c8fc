"""A token the flow cannot read fails at the flow's validation, with a fix for where it runs."""

from __future__ import annotations

import pytest

from flows.config import ProfileError
from flows.core.secrets import K8S_SECRET, require_secrets
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
