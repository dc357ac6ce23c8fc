"""A Vertex AI model upload the service carried out but whose answer the client never got
(a timeout) is found again by the retry, not made a second time: one version per flow run,
however many tries it took, and a new run still gets a version of its own."""

from __future__ import annotations

import pytest

from flows.config import load_profile
from flows.core.storage import LocalStorage
from flows.integrations import vertex_registry
from flows.integrations.judged_model import JudgedModel
from flows.integrations.register import register_judged
from tests.fakes.vertex_models import VertexModels

VERTEX = {"eval.batches": "4", "promotion.register.vertex.project": "my-proj-123",
          "promotion.register.vertex.location": "us-central1",
          "promotion.register.vertex.display_name": "Qwen3 GRPO",
          "promotion.register.vertex.serving_image":
              "us-docker.pkg.dev/vertex-ai/prediction/vllm:latest"}
NAME = "projects/my-proj-123/locations/us-central1/models/qwen3_grpo"


def _judged(run: str, flow_run_id: str) -> JudgedModel:
    return JudgedModel(profile="rehearsal", run=run, flow_run_id=flow_run_id,
                       export_uri=f"gs://b/exports/{run}", promoted=True, reason="better",
                       scores={"mean_reward": 0.6}, base_scores={"mean_reward": 0.4})


@pytest.fixture
def vertex(monkeypatch: pytest.MonkeyPatch) -> VertexModels:
    service = VertexModels()
    monkeypatch.setattr(vertex_registry, "authorized_session", lambda: service)
    monkeypatch.setattr(vertex_registry, "POLL_S", 0.0)
    return service


def _register(model: JudgedModel, warnings: list[str]) -> str | None:
    profile = load_profile("rehearsal", VERTEX, environ={})
    return register_judged(profile, model, LocalStorage(), warnings.append, delays_s=(0.0,))


def test_a_lost_answer_to_the_first_upload_of_a_model_leaves_one_version(
        vertex: VertexModels) -> None:
    vertex.answers_lost = 2  # the retry must not upload at all, so the second stays unused
    warnings: list[str] = []
    where = _register(_judged("r1", "5d1c0f7e-0b1e-4c55-9a44-0d7b1f1c2a01"), warnings)
    assert where == f"{NAME}@1"
    assert len(vertex.models[NAME]) == 1
    [warning] = warnings
    assert "ReadTimeout" in warning
    uploads = [url for method, url, _ in vertex.requests if url.endswith("/models:upload")]
    assert len(uploads) == 1 and vertex.answers_lost == 1


def test_a_lost_answer_to_a_later_version_leaves_one_version_and_the_next_run_gets_its_own(
        vertex: VertexModels) -> None:
    warnings: list[str] = []
    assert _register(_judged("r1", "id-one"), warnings) == f"{NAME}@1"
    vertex.answers_lost = 1
    assert _register(_judged("r2", "id-two"), warnings) == f"{NAME}@2"
    assert len(vertex.models[NAME]) == 2
    assert _register(_judged("r2", "id-two"), warnings) == f"{NAME}@2"  # a rerun: found
    vertex.page_size = 1  # the run's version on a later page of the listing
    assert _register(_judged("r3", "id-three"), warnings) == f"{NAME}@3"
    assert _register(_judged("r3", "id-three"), warnings) == f"{NAME}@3"
    assert [m["labels"]["tpurl-flow-run"] for m in vertex.models[NAME]] == [
        "id-one", "id-two", "id-three"]
