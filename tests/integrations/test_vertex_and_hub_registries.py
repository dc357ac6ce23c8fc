"""Vertex AI Model Registry and Hugging Face Hub registration at their client
seams, with the request shapes those services document (tests/fakes cite them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from flows.config import load_profile
from flows.core.redaction import redact
from flows.core.storage import LocalStorage
from flows.integrations.hub_registry import branch_name, upload_revision
from flows.integrations.judged_model import JudgedModel
from flows.integrations.register import register_judged
from flows.integrations.vertex_registry import label, upload_version
from tests.fakes.hub_api import FakeHub
from tests.fakes.vertex_models import VertexModels
from tests.support.profiles import fake_hf_token


def _judged(export: str, run: str = "rehearsal-20261203-100000", promoted: bool = True):
    return JudgedModel(profile="rehearsal", run=run, flow_run_id=f"id-{run}", export_uri=export,
                       promoted=promoted, reason="mean_reward 0.61 ≥ 0.42 + 0.0",
                       scores={"accuracy": 0.5, "mean_reward": 0.6125},
                       base_scores={"accuracy": 0.25, "mean_reward": 0.42},
                       lineage={"dataset": "hub:openai/gsm8k"})


VERTEX = {"eval.batches": "4", "promotion.register.vertex.project": "my-proj-123",
          "promotion.register.vertex.location": "us-central1",
          "promotion.register.vertex.display_name": "Qwen3 GRPO",
          "promotion.register.vertex.serving_image":
              "us-docker.pkg.dev/vertex-ai/prediction/vllm:latest"}


def test_a_promoted_export_becomes_a_vertex_model_version_with_scores_as_labels() -> None:
    config = load_profile("rehearsal", VERTEX).promotion_rule.register.vertex
    vertex = VertexModels()
    first = upload_version(config, _judged("gs://b/exports/1"), vertex, sleep=lambda s: None)
    second = upload_version(config, _judged("gs://b/exports/2", run="r2"), vertex,
                            sleep=lambda s: None)
    name = "projects/my-proj-123/locations/us-central1/models/qwen3_grpo"
    assert (first, second) == (f"{name}@1", f"{name}@2")
    uploads = [body for method, _, body in vertex.requests if method == "POST"]
    assert uploads[0]["modelId"] == "qwen3_grpo" and "parentModel" not in uploads[0]
    assert uploads[1]["parentModel"] == name and "modelId" not in uploads[1]
    model = uploads[1]["model"]
    assert model["artifactUri"] == "gs://b/exports/2"
    assert model["containerSpec"] == {"imageUri": config.serving_image}
    assert model["labels"]["score-mean_reward"] == "0_6125"
    assert model["labels"]["tpurl-decision"] == "promoted"
    assert all(label(k) == k and label(v) == v for k, v in model["labels"].items())
    assert all(url.startswith("https://us-central1-aiplatform.googleapis.com/v1/projects/")
               for _, url, _ in vertex.requests)


def test_a_promoted_export_is_uploaded_to_a_private_hub_revision_and_the_token_stays_out(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    token = fake_hf_token("Hq7Zr2Lw9xK")
    monkeypatch.setenv("HUB_WRITE_TOKEN", token)
    profile = load_profile("rehearsal", {"eval.batches": "4",
                                         "promotion.register.hub.repo_id": "org/qwen3-grpo",
                                         "promotion.register.hub.token.env": "HUB_WRITE_TOKEN"})
    export = tmp_path / "export"
    export.mkdir()
    (export / "model.safetensors").write_bytes(b"weights")
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        (export / name).write_text("{}")
    hub = FakeHub()
    config = profile.promotion_rule.register.hub
    where = upload_revision(config, _judged(export.as_uri()), LocalStorage(), None, hub.api)
    repo = hub.repos["org/qwen3-grpo"]
    assert repo.private and where == f"org/qwen3-grpo@{repo.commits[-1]}"
    branch = branch_name("rehearsal-20261203-100000")
    assert repo.branches[branch] == {"model.safetensors": b"weights", "config.json": b"{}",
                                     "tokenizer.json": b"{}", "tokenizer_config.json": b"{}"}
    assert repo.branches["main"] == {}  # a revision, not main
    assert hub.tokens == [token] and redact(f"x {token} y") != f"x {token} y"  # registered

    # a rejected model never reaches the hub
    assert register_judged(profile, _judged(export.as_uri(), promoted=False),
                           LocalStorage()) is None
