"""The example chained on `tpurl.model.promoted`: the automation docs/how-to/evaluation.md ships is accepted
by a real Prefect API, and its deployment's flow records only the promoted model."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import yaml

from flows.common.paths import REPO_ROOT
from flows.config import load_profile
from flows.core.promotion_store import pointer_uris, read_promoted
from flows.core.storage import LocalStorage
from flows.runpage.promotion import MODEL_PROMOTED, promote_or_reject
from tests.support.scores import summary

AUTOMATION = REPO_ROOT / "deployments/automations/serve-on-promoted.yaml"


def test_the_automation_is_accepted_and_runs_on_promotions_only(prefect_api) -> None:
    from prefect.automations import Automation

    text = AUTOMATION.read_text()
    assert text.count("REPLACE-WITH-DEPLOYMENT-ID") == 2  # the sed line and the field
    deployment_id = str(uuid.uuid4())
    spec = yaml.safe_load(text.replace("REPLACE-WITH-DEPLOYMENT-ID", deployment_id))
    created = Automation.model_validate(spec).create()
    stored = Automation.read(id=created.id)
    assert set(stored.trigger.expect) == {MODEL_PROMOTED}
    [action] = stored.actions
    assert str(action.deployment_id) == deployment_id
    assert action.parameters["model_uri"] == "{{ event.payload.model_uri }}"


def _promoted_export(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("TPURL_LOCAL__ROOT", str(tmp_path))
    profile = load_profile("rehearsal")
    storage = LocalStorage()
    export = tmp_path / "exports" / "1"
    export.mkdir(parents=True)
    (export / "model.safetensors").write_bytes(b"weights")
    evaluation = {"trained": summary(0.5).model_dump(), "base": summary(0.3).model_dump()}
    promote_or_reject(storage, profile, "run-1", evaluation,
                      {"hf_export": export.as_uri(), "trained_checkpoint": "file:///c/1"},
                      None, "k", "s")
    return profile, storage, export


def test_the_serving_flow_records_the_promoted_model_and_refuses_another(
        prefect_api, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from flows.serving import record_promoted_model

    profile, storage, export = _promoted_export(tmp_path, monkeypatch)
    served = record_promoted_model("rehearsal", export.as_uri(), "run-1")
    assert served == pointer_uris(profile)[0].replace("promoted.json", "served.json")
    assert f'"model_uri": "{export.as_uri()}"' in storage.read_text(served)
    with pytest.raises(ValueError, match="not the promoted model"):
        record_promoted_model("rehearsal", "file:///exports/0-older", "run-0")


def test_the_serving_flow_refuses_a_pointer_that_no_longer_matches_its_export(
        prefect_api, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The bucket is writable by every training pod. Swapped weights under the
    promoted export, or a pointer rewritten without its digest, are not served."""
    from flows.serving import record_promoted_model

    profile, storage, export = _promoted_export(tmp_path, monkeypatch)
    served = pointer_uris(profile)[0].replace("promoted.json", "served.json")
    (export / "model.safetensors").write_bytes(b"swapped")
    with pytest.raises(ValueError, match=r"not trusted: the export .* no longer matches"):
        record_promoted_model("rehearsal", export.as_uri(), "run-1")
    assert storage.read_text(served) is None
    (export / "model.safetensors").write_bytes(b"weights")
    pointer = read_promoted(storage, profile)
    storage.write_text(pointer_uris(profile)[0],
                       pointer.model_copy(update={"export_digest": ""}).model_dump_json())
    with pytest.raises(ValueError, match="carries no export digest"):
        record_promoted_model("rehearsal", export.as_uri(), "run-1")
    assert storage.read_text(served) is None
