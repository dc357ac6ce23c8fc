"""flows/core/lineage.py's rules one by one (the skip decision's inputs): the config key, a
record's mismatch with the current inputs and its reason, outputs that leave the output
root, a record's identity, and reading a damaged record."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from flows.core.lineage import (
    FORMAT_VERSION,
    LineageRecord,
    UnreadableRecord,
    config_key,
    linked_out,
    outside_root,
    read_record,
    relative_outputs,
    verified_identity,
    write_record,
)
from flows.core.manifest import FileEntry
from flows.core.storage import LocalStorage, file_uri

ROOT = "gs://b/outs"


def record(**fields: object) -> LineageRecord:
    return LineageRecord.model_validate({"stage": "train", "key": "k1", "inputs": {"a": "1"},
                                         "outputs": {"ckpt": "./c"}, "run_id": "r", **fields})


def test_the_config_key_is_short_stable_and_order_free():
    assert config_key({"b": 1, "a": 2}, "x") == config_key({"a": 2, "b": 1}, "x")
    assert config_key(1) != config_key(2) and len(config_key(1)) == 12
    assert config_key(Path("/p")) == config_key("/p")  # str() of what JSON cannot hold


def test_a_record_matches_only_its_key_and_its_inputs_saying_why_not():
    rec = record(inputs={"a": "1", "b": "2"})
    assert rec.matches("k1", {"a": "1", "b": "2"}) and rec.mismatch("k1", {"b": "2", "a": "1"}) is None
    assert rec.mismatch("k2", {"a": "1", "b": "2"}) == "key k1, now k2"
    assert rec.mismatch("k1", {"a": "9", "b": "2"}) == "changed since: a"
    assert rec.mismatch("k1", {"b": "2", "c": "3"}) == "changed since: a, c"
    assert not rec.matches("k1", {})
    old = record(format=FORMAT_VERSION + 1)
    assert old.mismatch("k1", {"a": "1"}) == (
        f"a record of format {FORMAT_VERSION + 1}, this version writes {FORMAT_VERSION}")


def test_the_fingerprint_changes_with_each_part_it_covers():
    base = record().fingerprint
    assert base == record().fingerprint
    for change in ({"stage": "convert"}, {"key": "k2"}, {"inputs": {"a": "2"}},
                   {"outputs": {"ckpt": "./d"}}, {"run_id": "s"}):
        assert record(**change).fingerprint != base, change
    assert record(details={"x": 1}).fingerprint == base


def test_outputs_resolve_against_the_current_root_and_are_stored_relative_to_it():
    rec = record(outputs={"ckpt": "./run/c", "image": "example/img:1"})
    assert rec.resolved_outputs("gs://new/") == {"ckpt": "gs://new/run/c", "image": "example/img:1"}
    assert relative_outputs({"ckpt": "gs://b/outs/run/c", "x": "gs://b/outsx/c",
                             "image": "example/img:1"}, "gs://b/outs/") == {
        "ckpt": "./run/c", "x": "gs://b/outsx/c", "image": "example/img:1"}


@pytest.mark.parametrize(("outputs", "why"), [
    ({"c": "./run/c", "m": "hf://org/m", "v": "venv:/x", "r": f"{ROOT}", "s": f"{ROOT}/"}, None),
    ({"c": "./run/../../x"}, "output c './run/../../x' climbs out of the output root"),
    ({"c": ".//etc/x"}, "output c './/etc/x' climbs out of the output root"),
    ({"c": "gs://b/other/x"}, "output c 'gs://b/other/x' is outside the output root gs://b/outs"),
    ({"c": "gs://b/outsx/x"}, "output c 'gs://b/outsx/x' is outside the output root gs://b/outs"),
    ({"c": f"{ROOT}/a/../../x"}, f"output c '{ROOT}/a/../../x' climbs out of the output root"),
    ({"c": "file:///etc/x"}, "output c 'file:///etc/x' is outside the output root gs://b/outs"),
])
def test_outputs_outside_the_root_are_named(outputs, why):
    assert outside_root(outputs, ROOT + "/") == why
    assert outside_root({"ok": "./fine", **outputs}, ROOT) == why


def test_a_link_out_of_a_local_root_is_named(tmp_path: Path):
    root, elsewhere = tmp_path / "root", tmp_path / "elsewhere"
    (root / "run").mkdir(parents=True)
    elsewhere.mkdir()
    os.symlink(elsewhere, root / "run" / "link")
    storage = LocalStorage()
    inside = {"c": file_uri(root / "run"), "image": "example/img:1"}
    assert linked_out(storage, inside, file_uri(root)) is None
    why = linked_out(storage, {**inside, "l": file_uri(root / "run" / "link")}, file_uri(root))
    assert why == (f"output l {file_uri(root / 'run' / 'link')} resolves to "
                   f"{os.path.realpath(elsewhere)}, outside {os.path.realpath(root)}")


def test_the_identity_is_the_verified_files_or_else_the_details():
    files = {"c": {"a.bin": FileEntry(size=3, digest="d1", stamp="t1")}}
    same = {"c": {"a.bin": FileEntry(size=3, digest="d1", stamp="t2")}}
    first = verified_identity(files, {"x": 1})
    assert first.startswith("verified:") and len(first) == len("verified:") + 32
    assert first == verified_identity(same, {"y": 2})  # stamps and details do not count
    assert first != verified_identity({"c": {"a.bin": FileEntry(size=4, digest="d1",
                                                                stamp="t1")}}, {})
    assert first != verified_identity({"c": {"a.bin": FileEntry(size=3, digest="d2",
                                                                stamp="t1")}}, {})
    assert verified_identity({}, {"x": 1}) != verified_identity({}, {"x": 2})
    assert verified_identity({}, {"x": 1}) == verified_identity({}, {"x": 1})


def test_a_record_round_trips_and_a_damaged_one_is_unreadable_not_missing(tmp_path: Path):
    storage = LocalStorage()
    uri = file_uri(tmp_path / "record.json")
    assert read_record(storage, uri) is None
    written = record()
    write_record(storage, uri, written)
    assert read_record(storage, uri) == written
    (tmp_path / "record.json").write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(UnreadableRecord, match=r"record.json is not a lineage record \(not UTF-8 text\)"):
        read_record(storage, uri)
    (tmp_path / "record.json").write_text('{"stage": "train"}')
    with pytest.raises(UnreadableRecord, match=r"is not a lineage record \(1 validation error"):
        read_record(storage, uri)


def test_the_identity_is_the_same_in_every_version_of_the_tool():
    """Stored records carry it: a version that computed it otherwise would rerun every
    stage after a verified output (so its value is pinned here)."""
    files = {"b": {"z.bin": FileEntry(size=1, digest="d", stamp="t")},
             "a": {"y": FileEntry(size=2, digest="e", stamp="t")}}
    assert verified_identity(files, {}) == "verified:fd589f62cac563b8c46fd66e72f90231"
    assert verified_identity({}, {"path": Path("/p"), "b": 1, "a": 2}) == (
        "verified:b172898fad4e96a53ecc6c97285b1bc1")


def test_a_root_ending_in_any_character_is_compared_as_written():
    root = "gs://b/outsX"
    assert outside_root({"c": f"{root}/x", "r": root}, root) is None
    assert relative_outputs({"c": f"{root}/x"}, root + "/") == {"c": "./x"}
