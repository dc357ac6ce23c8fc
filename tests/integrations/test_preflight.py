"""An integration that cannot work is refused before the first stage, with the
field and the fix."""

from __future__ import annotations

import pytest

from flows.config import load_profile
from flows.integrations.preflight import integration_issues
from tests.support.net import free_port
from tests.support.profiles import fake_hf_token


def test_an_mlflow_server_that_does_not_answer_is_refused_naming_the_field() -> None:
    nobody = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    profile = load_profile("rehearsal", {"tracking.mlflow.tracking_uri": nobody,
                                         "eval.batches": "4",
                                         "promotion.register.mlflow.tracking_uri": nobody,
                                         "promotion.register.mlflow.model_name": "m"})
    issues = integration_issues(profile, environ={})
    assert [i.field for i in issues] == ["tracking.mlflow.tracking_uri",
                                         "promotion.register.mlflow.tracking_uri"]
    assert all("does not answer" in i.problem and "start the MLflow server" in i.fix
               for i in issues)


def test_a_registry_or_tracker_without_its_credentials_is_refused_naming_the_field() -> None:
    profile = load_profile("rehearsal", {
        "tracking.wandb.project": "grpo", "tracking.wandb.api_key.env": "WANDB_API_KEY",
        "eval.batches": "4", "promotion.register.hub.repo_id": "org/qwen3-grpo",
        "promotion.register.hub.token.env": "HUB_WRITE_TOKEN"})
    issues = integration_issues(profile, environ={})
    assert [i.field for i in issues] == ["tracking.wandb.api_key",
                                         "promotion.register.hub.token"]
    assert "WANDB_API_KEY is not set" in issues[0].fix
    token = fake_hf_token("Wp3Jt8Nv5qB")
    assert integration_issues(profile, environ={"WANDB_API_KEY": "k" * 40,
                                                "HUB_WRITE_TOKEN": token}) == []


@pytest.mark.parametrize(("field", "value", "fix"), [
    ("tracking.mlflow.tracking_uri", "file:///tmp/mlruns", "server's address"),
    ("tracking.mlflow.tracking_uri", "https://user:pw@mlflow.example", "MLFLOW_TRACKING_TOKEN"),
    ("tracking.wandb.project", "grpo", "api_key"),  # online without a key
    ("tracking.tensorboard.vertex_tensorboard", "my-board", "tensorboards/ID"),
    ("promotion.register.hub.repo_id", "../x", "owner/name"),
])
def test_shapes_are_refused_at_load_with_the_fix(field: str, value: str, fix: str) -> None:
    from flows.config import ProfileError

    with pytest.raises(ProfileError) as raised:
        load_profile("rehearsal", {field: value, "eval.batches": "4"})
    assert any(fix in issue.fix for issue in raised.value.issues), raised.value.issues
