"""Judged models in a real MLflow Model Registry (SQLite), the champion alias
on the promoted one only, and the serving example reading the champion."""

from __future__ import annotations

from pathlib import Path

import pytest

from flows.config import load_profile
from flows.core.promotion import Decision
from flows.core.promotion_store import pointer_uris
from flows.core.storage import LocalStorage
from flows.integrations.judged_model import judged_model
from flows.integrations.register import register_judged
from flows.runpage.promotion import promote_or_reject
from tests.support.mlflow_server import MlflowServer
from tests.support.scores import summary

pytestmark = [pytest.mark.services, pytest.mark.realtime]
MODEL = "qwen3-grpo"


def _profile(server: MlflowServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("TPURL_LOCAL__ROOT", str(tmp_path))
    return load_profile("rehearsal", {"eval.batches": "4",
                                      "promotion.register.mlflow.tracking_uri": server.uri,
                                      "promotion.register.mlflow.model_name": MODEL})


def _judge(profile, tmp_path: Path, run: str, mean: float):
    """A real decision over a real export: the pointer moves when it passes."""
    storage = LocalStorage()
    export = tmp_path / "exports" / run
    export.mkdir(parents=True)
    (export / "model.safetensors").write_bytes(run.encode())
    evaluation = {"trained": summary(mean).model_dump(), "base": summary(0.3).model_dump()}
    artifacts = {"hf_export": export.as_uri(), "trained_checkpoint": f"file:///c/{run}"}
    decision, promoted = promote_or_reject(storage, profile, run, evaluation, artifacts,
                                           None, "eval-key", "score-key")
    model = judged_model(profile, run, f"id-{run}", decision, evaluation, artifacts,
                         promoted if decision.promoted else None, None)
    return decision, model, export


def test_promoted_and_rejected_models_become_versions_and_only_the_promoted_is_champion(
        mlflow_server: MlflowServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mlflow import MlflowClient

    profile = _profile(mlflow_server, tmp_path, monkeypatch)
    storage = LocalStorage()
    first, model1, export1 = _judge(profile, tmp_path, "run-1", 0.6)
    assert first.promoted
    assert register_judged(profile, model1, storage) == f"mlflow:{MODEL}/1"
    assert register_judged(profile, model1, storage) == f"mlflow:{MODEL}/1"  # a retry: no 2nd
    worse, model2, _ = _judge(profile, tmp_path, "run-2", 0.1)
    assert isinstance(worse, Decision) and not worse.promoted
    assert register_judged(profile, model2, storage) == f"mlflow:{MODEL}/2"

    client = MlflowClient(mlflow_server.uri)
    champion = client.get_model_version_by_alias(MODEL, "champion")
    assert champion.version == "1" and champion.tags["tpurl.model_uri"] == export1.as_uri()
    # a file:// export is a path on this machine: the server keeps a copy to register
    copied = client.download_artifacts(champion.run_id, "export", str(tmp_path / "copy"))
    assert (Path(copied) / "model.safetensors").read_bytes() == b"run-1"
    assert champion.tags["tpurl.decision"] == "promoted"
    assert float(champion.tags["score.mean_reward"]) == pytest.approx(0.6)
    assert champion.tags["lineage.revision"] == profile.model.hf_revision
    assert champion.tags["lineage.export_digest"]
    rejected = client.get_model_version(MODEL, "2")
    assert rejected.tags["tpurl.decision"] == "rejected" and not rejected.aliases
    assert rejected.tags["tpurl.decision_reason"] == worse.reason


def test_the_serving_example_serves_the_registry_champion_only(
        mlflow_server: MlflowServer, prefect_api, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from flows.serving import record_promoted_model

    monkeypatch.setenv("TPURL_PROMOTION__REGISTER__MLFLOW__TRACKING_URI", mlflow_server.uri)
    monkeypatch.setenv("TPURL_PROMOTION__REGISTER__MLFLOW__MODEL_NAME", "served-model")
    monkeypatch.setenv("TPURL_EVAL__BATCHES", "4")
    profile = _profile(mlflow_server, tmp_path, monkeypatch)
    profile = load_profile("rehearsal")
    assert profile.promotion_rule.register.mlflow.model_name == "served-model"
    _, model, export = _judge(profile, tmp_path, "run-9", 0.7)
    with pytest.raises(ValueError, match="not the champion"):  # registered nowhere yet
        record_promoted_model("rehearsal", export.as_uri(), "run-9")
    register_judged(profile, model, LocalStorage())
    served = record_promoted_model("rehearsal", export.as_uri(), "run-9")
    assert served == pointer_uris(profile)[0].replace("promoted.json", "served.json")
    (export / "model.safetensors").write_bytes(b"swapped")
    with pytest.raises(ValueError, match="no longer matches its registered digest"):
        record_promoted_model("rehearsal", export.as_uri(), "run-9")


def test_the_flow_reports_its_run_and_registers_its_promoted_model(
        mlflow_server: MlflowServer, prefect_api, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The real flow (stand-in stages): one MLflow run tagged with the flow run, the model
    registered as champion, and both linked from the result."""
    from mlflow import MlflowClient

    from flows import pipeline
    from tests.integrations.stand_in_stages import stand_ins

    monkeypatch.setattr(pipeline, "STAGE_BY_NAME", stand_ins(tmp_path / "root"))
    state = pipeline.rl_post_training(profile="rehearsal", overrides={
        "local.root": str(tmp_path / "root"), "eval.batches": "4",
        "tracking.mlflow.tracking_uri": mlflow_server.uri, "tracking.mlflow.experiment": "flow",
        "promotion.register.mlflow.tracking_uri": mlflow_server.uri,
        "promotion.register.mlflow.model_name": "flow-model"}, return_state=True)
    assert state.is_completed(), state
    result = state.result()
    assert result.evaluation["registered"] == "mlflow:flow-model/1"
    client = MlflowClient(mlflow_server.uri)
    [run] = client.search_runs([client.get_experiment_by_name("flow").experiment_id])
    assert result.tracking["mlflow"].endswith(run.info.run_id)
    assert run.data.tags["tpurl.flow_run_id"] == str(state.state_details.flow_run_id)
    assert run.data.tags["tpurl.key"] == "k-export" and run.data.tags["tpurl.decision"] == "promoted"
    assert [m.value for m in client.get_metric_history(run.info.run_id, "actor/train/loss")] \
        == [0.9, 0.4]
    assert client.get_model_version_by_alias("flow-model", "champion").version == "1"


def test_a_rollback_moves_the_champion_alias_back_to_the_earlier_version(
        mlflow_server: MlflowServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Two promoted runs registered, then `tpurl rollback --to` the first: the alias, the
    pointer and the history name it, and both versions are kept."""
    from mlflow import MlflowClient

    from flows.cli import main
    from flows.core.promotion_store import read_history, read_promoted

    model = "qwen3-grpo-rollback"
    monkeypatch.setenv("TPURL_LOCAL__ROOT", str(tmp_path))
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    profile = load_profile("rehearsal", {"eval.batches": "4",
                                         "promotion.register.mlflow.tracking_uri":
                                             mlflow_server.uri,
                                         "promotion.register.mlflow.model_name": model})
    storage = LocalStorage()
    for run, mean in (("run-1", 0.6), ("run-2", 0.8)):
        decision, judged, _ = _judge(profile, tmp_path, run, mean)
        assert decision.promoted
        assert register_judged(profile, judged, storage) is not None
    client = MlflowClient(mlflow_server.uri)
    assert client.get_model_version_by_alias(model, "champion").version == "2"
    args = ["rollback", "rehearsal", "--set", f"promotion.register.mlflow.tracking_uri="
            f"{mlflow_server.uri}", "--set", f"promotion.register.mlflow.model_name={model}",
            "--reason", "canary errors", "--by", "oncall"]
    assert main([*args, "--to", "run-1", "--dry-run"]) == 0
    assert "MLflow alias champion -> version 1" in capsys.readouterr().out
    assert client.get_model_version_by_alias(model, "champion").version == "2"  # dry: untouched
    assert main([*args, "--to", "run-1"]) == 0
    champion = client.get_model_version_by_alias(model, "champion")
    assert champion.version == "1" and champion.tags["tpurl.run"] == "run-1"
    assert {v.version for v in client.search_model_versions(f"name = '{model}'")} == {"1", "2"}
    pointer = read_promoted(storage, profile)
    assert pointer is not None and pointer.run == "run-1" and pointer.kind == "rollback"
    assert [m.kind for m in read_history(storage, profile)] == ["promotion", "promotion",
                                                                  "rollback"]
    # run-2 was never registered as promoted under another model name: refused, unchanged
    other = [*args[:4], "--set", "promotion.register.mlflow.model_name=another", *args[6:]]
    assert main([*other, "--to", "run-2"]) == 2
    assert "promotion.register.mlflow: model another has no version promoted by run run-2" \
        in capsys.readouterr().err
    assert read_promoted(storage, profile) == pointer
