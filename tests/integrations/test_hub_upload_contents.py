"""What reaches a Hugging Face Hub repository, and its visibility: the export's model files
only (never the lineage record, the logs, the ownership marker or anything else beside the
model), and an existing repository's visibility is never changed; a profile that keeps its
models private uploads nothing into a public repository."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from flows.config import load_profile
from flows.config.registry import HubRegistry
from flows.core.storage import LocalStorage
from flows.integrations.hub_registry import HubUploadRefused, branch_name, upload_revision
from flows.integrations.judged_model import JudgedModel
from flows.integrations.register import register_judged
from tests.fakes.hub_api import FakeHub, HubRepo
from tests.support.gcs import GCS_BUCKET
from tests.support.profiles import fake_hf_token

RUN = "rehearsal-20261203-100000"
SHARDS = ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")
MODEL = {"config.json": b'{"model_type": "qwen3_moe"}', "generation_config.json": b"{}",
         "tokenizer.json": b'{"model": {}}', "tokenizer_config.json": b"{}",
         "special_tokens_map.json": b"{}", "model.safetensors.index.json": json.dumps(
             {"metadata": {}, "weight_map": {"a": SHARDS[0], "b": SHARDS[1]}}).encode(),
         SHARDS[0]: b"weights-1", SHARDS[1]: b"weights-2"}
# What else an export directory holds: the pipeline's own files and what programs left
PIPELINE_AND_STRAY = {
    "tpurl-lineage.json": b'{"inputs": {"dataset": "gs://private-bucket/data"}}',
    "tpurl-logs/export-maxtext-to-hf.log": b"HF_TOKEN=... loaded from /home/ci/.netrc",
    "tpurl-logs/export-maxtext-to-hf.pid": b"4242",
    ".tpurl-owned": b"tpurl",
    "tpurl-result.json": b'{"artifacts": {}}',
    "run.json": b'{"flow_run_id": "x"}',
    "notes.txt": b"scratch",
    "model-00009-of-00009.safetensors": b"a shard of an earlier export, not in the index",
    "pytorch_model.bin": b"a pickle",
    "checkpoints/0/items/manifest.ocdbt": b"orbax",
    ".cache/tmp.lock": b"",
}


def _judged(export_uri: str) -> JudgedModel:
    return JudgedModel(profile="rehearsal", run=RUN, flow_run_id=f"id-{RUN}", export_uri=export_uri,
                       promoted=True, reason="mean_reward 0.61 ≥ 0.42 + 0.0",
                       scores={"mean_reward": 0.6125}, base_scores={"mean_reward": 0.42})


def _config(monkeypatch: pytest.MonkeyPatch, **hub: str) -> HubRegistry:
    monkeypatch.setenv("HUB_WRITE_TOKEN", fake_hf_token("Rk4Vn8Ty2Zc"))
    profile = load_profile("rehearsal", {
        "eval.batches": "4", "promotion.register.hub.repo_id": "org/qwen3-grpo",
        "promotion.register.hub.token.env": "HUB_WRITE_TOKEN",
        **{f"promotion.register.hub.{k}": v for k, v in hub.items()}})
    return profile.promotion_rule.register.hub


def _export(root: Path) -> Path:
    for name, data in {**MODEL, **PIPELINE_AND_STRAY}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return root


def test_only_the_model_files_of_a_local_export_reach_the_hub(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    export = _export(tmp_path / "export")
    hub = FakeHub()
    upload_revision(_config(monkeypatch), _judged(export.as_uri()), LocalStorage(), None, hub.api)
    assert hub.repos["org/qwen3-grpo"].branches[branch_name(RUN)] == MODEL
    assert (export / "tpurl-lineage.json").exists()  # the export itself is left as it was


def test_only_the_model_files_of_an_export_in_a_bucket_reach_the_hub(
        store: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    export_uri = f"gs://{GCS_BUCKET}/exports/run-1"
    bucket = store.client.bucket(GCS_BUCKET)
    for name, data in {**MODEL, **PIPELINE_AND_STRAY}.items():
        bucket.blob(f"exports/run-1/{name}").upload_from_string(data)
    hub = FakeHub()
    upload_revision(_config(monkeypatch), _judged(export_uri), store, None, hub.api)
    assert hub.repos["org/qwen3-grpo"].branches[branch_name(RUN)] == MODEL


def test_an_export_that_is_not_a_whole_model_is_not_uploaded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    export = _export(tmp_path / "export")
    (export / SHARDS[1]).unlink()
    hub = FakeHub()
    with pytest.raises(HubUploadRefused, match=SHARDS[1]):
        upload_revision(_config(monkeypatch), _judged(export.as_uri()), LocalStorage(), None,
                        hub.api)
    assert hub.repos == {} and hub.calls == []


def test_a_public_repository_is_left_public_and_gets_nothing_from_a_private_profile(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    export = _export(tmp_path / "export")
    hub = FakeHub(repos={"org/qwen3-grpo": HubRepo(private=False)})
    config = _config(monkeypatch)  # private: true, the default
    with pytest.raises(HubUploadRefused) as refused:
        upload_revision(config, _judged(export.as_uri()), LocalStorage(), None, hub.api)
    assert "promotion.register.hub.private" in str(refused.value)
    repo = hub.repos["org/qwen3-grpo"]
    assert not repo.private and repo.branches == {"main": {}} and repo.commits == []
    assert "update_repo_settings" not in hub.calls and "upload_folder" not in hub.calls

    warnings: list[str] = []  # through the registry's report: a warning, never a failed run
    profile = load_profile("rehearsal", {
        "eval.batches": "4", "promotion.register.hub.repo_id": "org/qwen3-grpo",
        "promotion.register.hub.token.env": "HUB_WRITE_TOKEN"})
    monkeypatch.setattr("huggingface_hub.HfApi", hub.api)
    assert register_judged(profile, _judged(export.as_uri()), LocalStorage(), warnings.append,
                           delays_s=(0.0,)) is None
    assert warnings and "public" in warnings[-1] and not hub.repos["org/qwen3-grpo"].private


def test_an_existing_private_repository_stays_private_when_the_profile_allows_public(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    export = _export(tmp_path / "export")
    hub = FakeHub(repos={"org/qwen3-grpo": HubRepo(private=True)})
    upload_revision(_config(monkeypatch, private="false"), _judged(export.as_uri()),
                    LocalStorage(), None, hub.api)
    repo = hub.repos["org/qwen3-grpo"]
    assert repo.private and repo.branches[branch_name(RUN)] == MODEL
    assert "update_repo_settings" not in hub.calls


@pytest.mark.parametrize(("private", "public"), [(None, False), ("true", False),
                                                  ("false", True)])
def test_a_new_repository_is_private_unless_the_profile_says_public(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, private: str | None,
        public: bool) -> None:
    export = _export(tmp_path / "export")
    hub = FakeHub()
    config = _config(monkeypatch, **({"private": private} if private else {}))
    upload_revision(config, _judged(export.as_uri()), LocalStorage(), None, hub.api)
    assert hub.repos["org/qwen3-grpo"].private is not public
