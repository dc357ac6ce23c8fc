"""W&B on GKE: the training JobSet carries the profile's W&B settings as plain env
and the API key only as a reference to the Secret the plan creates for it; valid against
Kubernetes' own schemas and the JobSet CRD, and no key value anywhere in the manifests."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from flows.backends.gke.jobs.common import WORKLOAD_CONTAINER
from flows.backends.gke.jobs.manifests import render_all, to_yaml, write_manifests
from flows.backends.gke.jobs.options import options_for
from flows.backends.gke.jobs.secret_objects import secret_placeholder
from flows.config.errors import ProfileError
from flows.core.layout import Layout
from flows.operations.plan import planned_workloads
from tests.support.jobset_schema import KUBERNETES_VERSION, jobset_errors
from tests.support.profiles import tutorial_profile

WANDB = {"tracking.wandb.project": "qwen3-grpo", "tracking.wandb.entity": "my-team",
         "tracking.wandb.api_key.env": "WB_KEY_FOR_GKE_TEST"}


def _program_env(jobset: dict[str, Any]) -> dict[str, Any]:
    [container] = [c for rj in jobset["spec"]["replicatedJobs"]
                   for c in rj["template"]["spec"]["template"]["spec"]["containers"]
                   if c["name"] == WORKLOAD_CONTAINER]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def _by_stage(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["labels"]["tpurl/stage"]: o for o in objects if o["kind"] == "JobSet"}


def test_the_training_jobset_reads_the_key_from_its_secret_and_the_rest_from_the_profile(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key = os.urandom(20).hex()
    monkeypatch.setenv("WB_KEY_FOR_GKE_TEST", key)  # set, as during a real run: must not leak
    profile = tutorial_profile(**WANDB)
    objects = render_all(profile, planned_workloads(profile))
    jobsets = _by_stage(objects)
    env = _program_env(jobsets["train"])
    assert {k: v for k, v in env.items() if k.startswith("WANDB_") and k != "WANDB_API_KEY"} == {
        "WANDB_PROJECT": "qwen3-grpo", "WANDB_ENTITY": "my-team", "WANDB_MODE": "online",
        "WANDB_RUN_GROUP": Layout(profile).run_name, "WANDB_TAGS": "tpurl", "WANDB_CONSOLE": "off"}
    assert profile.tracking.wandb is not None and profile.tracking.wandb.api_key is not None
    wandb_secret = secret_placeholder(profile.tracking.wandb.api_key, profile.gke.namespace,
                                      options_for(profile).secret_owner)
    assert env["WANDB_API_KEY"] == {"secretKeyRef": {"name": wandb_secret["metadata"]["name"],
                                                     "key": "value"}}
    secrets = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Secret"}
    assert secrets[wandb_secret["metadata"]["name"]] == wandb_secret  # the plan creates it
    assert wandb_secret["metadata"]["annotations"]["tpurl/value-source"] == "env:WB_KEY_FOR_GKE_TEST"
    for stage in ("convert", "export"):  # only the training logs to W&B
        assert not [k for k in _program_env(jobsets[stage]) if k.startswith("WANDB_")], stage
    text = "".join(to_yaml(o) for o in objects)
    assert key not in text
    assert not [p for p in write_manifests(profile, planned_workloads(profile), tmp_path)
                if key in p.read_text()]
    assert jobset_errors(jobsets["train"]) == []
    for rj in jobsets["train"]["spec"]["replicatedJobs"]:
        job = {"apiVersion": "batch/v1", "kind": "Job",
               "metadata": {"name": f"{jobsets['train']['metadata']['name']}-{rj['name']}-0"},
               "spec": rj["template"]["spec"]}
        kubernetes_validate.validate(job, KUBERNETES_VERSION, strict=True)
    for secret in secrets.values():
        kubernetes_validate.validate(secret, KUBERNETES_VERSION, strict=True)


def test_offline_mode_on_gke_is_refused_naming_the_field_since_the_pod_keeps_nothing() -> None:
    with pytest.raises(ProfileError) as refused:
        tutorial_profile(**{"tracking.wandb.project": "qwen3-grpo",
                            "tracking.wandb.mode": "offline"})
    text = str(refused.value)
    assert "tracking.wandb.mode" in text and "online" in text, text


def test_a_profile_without_wandb_has_no_wandb_env() -> None:
    plain = tutorial_profile()
    train = _program_env(_by_stage(render_all(plain, planned_workloads(plain)))["train"])
    assert not [k for k in train if k.startswith("WANDB_")]
