"""Golden manifests for the tutorial profile (tests/golden/gke/), checked by hand against
research/gke-jobset.md. Content keys and the image tag are replaced by placeholders so the
files change only when the *shape* changes, not whenever a patch or argument moves a hash.

Regenerate after an intended change: TPURL_UPDATE_GOLDEN=1 pytest tests/backends/gke/jobs/test_golden.py,
then read the diff.
"""

from __future__ import annotations

import os
from pathlib import Path

import yaml

from flows.backends.gke.jobs.common import SPEC_DIGEST
from flows.backends.gke.jobs.manifests import render_all, to_yaml, write_manifests
from flows.config import Profile
from flows.core.layout import convert_key, export_key, image_key, train_key
from flows.plan import planned_workloads

GOLDEN = Path(__file__).parents[3] / "golden" / "gke" / "qwen3-30b-a3b-v6e-32"


def _normalized(profile: Profile) -> dict[str, str]:
    keys = {image_key(profile): "<image-key>", convert_key(profile): "<convert-key>",
            train_key(profile): "<train-key>", export_key(profile): "<export-key>"}
    files = {}
    for obj in render_all(profile, planned_workloads(profile)):
        if SPEC_DIGEST in obj["metadata"].get("annotations", {}):
            obj["metadata"]["annotations"][SPEC_DIGEST] = "<spec-digest>"
        text = to_yaml(obj)
        for value, placeholder in keys.items():
            text = text.replace(value, placeholder)
        stage = obj["metadata"].get("labels", {}).get("tpurl/stage", obj["kind"].lower())
        files[f"{stage}.yaml"] = text
    return files


def test_golden_manifests(profile: Profile):
    files = _normalized(profile)
    if os.environ.get("TPURL_UPDATE_GOLDEN"):
        GOLDEN.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (GOLDEN / name).write_text(text)
    assert sorted(p.name for p in GOLDEN.glob("*.yaml")) == sorted(files)
    for name, text in files.items():
        assert (GOLDEN / name).read_text() == text, f"{name} differs from the golden file"


def test_write_manifests_one_file_per_object(profile: Profile, tmp_path: Path):
    paths = write_manifests(profile, planned_workloads(profile), tmp_path)
    objects = render_all(profile, planned_workloads(profile))
    assert [yaml.safe_load(p.read_text()) for p in paths] == objects
    assert [p.name.split("-")[1] for p in paths] == ["secret", "jobset", "jobset", "jobset"]
    assert sorted(tmp_path.iterdir()) == sorted(paths)
