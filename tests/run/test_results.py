"""Results persist in the profile's bucket: ours and Prefect's, against fake-gcs-server."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from google.auth.credentials import AnonymousCredentials

from flows.backends.gke.gcs import GcsStorage
from flows.config import load_profile
from flows.run.result import (
    RESULT_FOLDER,
    PipelineResult,
    StageReport,
    ensure_gcs_result_storage,
    persist_result,
)
from tests.support.gcs import GCS_BUCKET as BUCKET
from tests.support.profiles import TUTORIAL, TUTORIAL_REQUIRED

pytest.importorskip("prefect_gcp")


def _result() -> PipelineResult:
    now = datetime.now(UTC).isoformat()
    return PipelineResult(
        profile=TUTORIAL, backend="gke",
        artifacts={"hf_export": f"gs://{BUCKET}/qwen3-30b-a3b/hf-trained/abc"},
        stages=[StageReport(stage="train", status="ran", duration_s=3600.0, chip_hours=32.0,
                            uris={})],
        chip_hours=32.0, metrics={"steps": []}, wall_s=3600.0, started_at=now, finished_at=now)


def _profile():
    return load_profile(TUTORIAL, {**TUTORIAL_REQUIRED, "gke.bucket": BUCKET}, environ={})


def test_pipeline_result_is_written_beside_the_outputs(store: GcsStorage):
    result = _result()
    uri = persist_result(store, _profile(), "weekly-1", result)
    assert uri == f"gs://{BUCKET}/tpurl-results/{TUTORIAL}/weekly-1.json"
    latest = store.read_text(f"gs://{BUCKET}/tpurl-results/{TUTORIAL}/latest.json")
    assert PipelineResult.model_validate_json(latest) == result


def test_prefect_persists_flow_results_to_the_bucket(store, prefect_api, monkeypatch):
    """prefect-gcp's GcsBucket as result storage; only google.auth is stood in for (anonymous)."""
    import google.auth
    from prefect import flow
    from prefect_gcp import GcsBucket

    monkeypatch.setattr(google.auth, "default",
                        lambda *a, **k: (AnonymousCredentials(), "test-project"))
    slug = ensure_gcs_result_storage(_profile(), "tpurl-results-test")
    assert slug == "gcs-bucket/tpurl-results-test"

    @flow(persist_result=True, result_storage=GcsBucket.load("tpurl-results-test"),
          result_serializer="json")
    def tiny() -> dict:
        return {"answer": 42}

    assert tiny() == {"answer": 42}
    names = [name for name in store.files_under(f"gs://{BUCKET}/{RESULT_FOLDER}")]
    assert names, "Prefect wrote its result record into the bucket"
    assert '"answer":42' in store.read_text(names[0]).replace(" ", "")
