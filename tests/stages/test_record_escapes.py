"""A lineage record that points outside its output root is not trusted: the
record is read from the root or the bucket, which a training pod can write, and its outputs
are handed to the next stage (convert's checkpoint becomes training's load_parameters_path).
A record naming a copy elsewhere (absolute), climbing out with ``..``, or reaching it through
a symlink placed in the root: the stage runs again and the warning says why. Real records
and files; only the programs are instant (tests/fakes/stage_backend.py)."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest

from flows.core.lineage import outside_root
from tests.fakes.stage_backend import backend_at, local, run_all, statuses


def _rewrite_output(record: Path, value: str) -> None:
    data = json.loads(record.read_text())
    data["outputs"]["maxtext_checkpoint"] = value
    record.write_text(json.dumps(data))


@pytest.mark.parametrize("how", ["absolute", "dotdot", "symlink"])
def test_a_record_pointing_outside_the_root_reruns_the_stage(tmp_path: Path, caplog,
                                                             how: str) -> None:
    root = tmp_path / "root"
    run_all(backend_at(root))
    layout = backend_at(root).layout
    record = local(layout.record(layout.convert_dir))
    checkpoint = local(layout.converted_checkpoint)
    elsewhere = tmp_path / "planted"  # a checkpoint someone else chose, manifest-identical
    shutil.copytree(checkpoint, elsewhere)
    if how == "absolute":
        _rewrite_output(record, elsewhere.as_uri())
    elif how == "dotdot":
        rel = Path("../" * len(checkpoint.relative_to(root).parts)) / ".." / "planted"
        _rewrite_output(record, f"./{checkpoint.relative_to(root)}/{rel.as_posix()}")
    else:
        link = root / "planted-link"
        link.symlink_to(elsewhere, target_is_directory=True)
        _rewrite_output(record, "./planted-link")
    caplog.set_level(logging.INFO)
    again = backend_at(root)
    outputs = run_all(again)
    assert statuses(outputs)["convert"] == "ran" and again.runs["convert-hf-to-maxtext"] == 1
    assert "convert: the record is not trusted" in caplog.text
    assert {"absolute": "outside the output root", "dotdot": "climbs out of the output root",
            "symlink": "resolves to"}[how] in caplog.text
    # what the next stage got is the checkpoint inside the root, not the planted one
    assert outputs["convert"].uris["maxtext_checkpoint"] == layout.converted_checkpoint
    assert str(elsewhere) not in json.dumps(outputs["train"].model_dump())


@pytest.mark.parametrize(("outputs", "trusted"), [
    ({"a": "./model/convert/0/items"}, True),
    ({"root": "gs://b"}, True),  # the root itself (the infra stage's output)
    ({"a": "gs://b/model/x"}, True),
    ({"hf_model": "hf://Qwen/Qwen3@abc", "image": "venv:.venvs/rehearsal"}, True),
    ({"a": "gs://other-bucket/model"}, False),
    ({"a": "gs://b-evil/model"}, False),  # a prefix of the name is not the root
    ({"a": "./../elsewhere"}, False),
    ({"a": ".//abs"}, False),
    ({"a": "gs://b/model/../../x"}, False),
    ({"a": "file:///etc"}, False),
])
def test_outside_root_judges_the_text_of_every_output(outputs: dict[str, str],
                                                      trusted: bool) -> None:
    assert (outside_root(outputs, "gs://b") is None) == trusted
