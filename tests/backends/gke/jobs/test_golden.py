"""Golden manifests for the tutorial profile (tests/golden/gke/), checked by hand against the
JobSet that Cluster Toolkit's `gcluster job submit --pathways` builds. Content keys and the
image tag are replaced by placeholders so the files change only when the *shape* changes, not
whenever a patch or argument moves a hash.

Regenerate after an intended change: TPURL_UPDATE_GOLDEN=1 pytest tests/backends/gke/jobs/test_golden.py,
then read the diff.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from flows.backends.gke.jobs.common import SPEC_DIGEST
from flows.backends.gke.jobs.manifests import render_all, to_yaml, write_manifests
from flows.config import Profile
from flows.core.eval_programs import base_eval_key, trained_eval_key
from flows.core.layout import convert_key, export_key, image_key, run_key, train_key
from flows.operations.plan import planned_workloads
from tests.support.profiles import tutorial_profile

GOLDENS = Path(__file__).parents[3] / "golden" / "gke"
GOLDEN = GOLDENS / "qwen3-30b-a3b-v6e-32"
# The retrain deployment's profile: the tutorial's with the evaluation prefect.yaml gives it
# (tests/test_prefect_yaml.py checks that is what the deployment passes).
RETRAIN = {"eval.batches": "4"}


def _normalized(profile: Profile) -> dict[str, str]:
    keys = {image_key(profile): "<image-key>", convert_key(profile): "<convert-key>",
            train_key(profile): "<train-key>", run_key(profile): "<run-key>",
            export_key(profile): "<export-key>"}
    if profile.eval is not None:
        keys |= {base_eval_key(profile): "<base-eval-key>",
                 trained_eval_key(profile): "<trained-eval-key>"}
    objects = render_all(profile, planned_workloads(profile))
    for obj in objects:  # names hashed from a key or the program's digest
        stage = obj["metadata"].get("labels", {}).get("tpurl/stage", "")
        if obj["kind"] == "ConfigMap" or stage.startswith("evaluate"):
            keys[obj["metadata"]["name"]] = f"<{stage or obj['kind'].lower()}-name>"
    files = {}
    for obj in objects:
        if SPEC_DIGEST in obj["metadata"].get("annotations", {}):
            obj["metadata"]["annotations"][SPEC_DIGEST] = "<spec-digest>"
        if obj["kind"] == "ConfigMap":  # the shipped program: test_render compares its text
            obj["data"] = {name: "<program text>" for name in obj["data"]}
        text = to_yaml(obj)
        for value, placeholder in sorted(keys.items(), key=lambda kv: -len(kv[0])):
            text = text.replace(value, placeholder)
        stage = obj["metadata"].get("labels", {}).get("tpurl/stage", obj["kind"].lower())
        files[f"{stage}.yaml"] = text
    return files


@pytest.mark.parametrize(("directory", "overrides"), [
    ("qwen3-30b-a3b-v6e-32", {}), ("qwen3-30b-a3b-v6e-32-retrain", RETRAIN)])
def test_golden_manifests(directory: str, overrides: dict[str, str]):
    golden = GOLDENS / directory
    files = _normalized(tutorial_profile(**overrides))
    if os.environ.get("TPURL_UPDATE_GOLDEN"):
        golden.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (golden / name).write_text(text)
    assert sorted(p.name for p in golden.glob("*.yaml")) == sorted(files)
    for name, text in files.items():
        assert (golden / name).read_text() == text, f"{name} differs from the golden file"


def test_write_manifests_one_file_per_object(profile: Profile, tmp_path: Path):
    paths = write_manifests(profile, planned_workloads(profile), tmp_path)
    objects = render_all(profile, planned_workloads(profile))
    assert [yaml.safe_load(p.read_text()) for p in paths] == objects
    assert [p.name.split("-")[1] for p in paths] == ["secret", "jobset", "jobset", "jobset"]
    assert sorted(tmp_path.iterdir()) == sorted(paths)
