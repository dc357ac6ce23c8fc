"""`*.args` keys MaxText does not know are refused at validation, with a did-you-mean.

The accepted names are flows/config/maxtext_keys.json, generated from the pinned wheel by
scripts/maxtext_keys.py; these tests tie it to the pin, and test_maxtext_keys_pinned.py
regenerates it from the pinned package in the rehearsal venv and compares."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from flows.common.paths import REPO_ROOT
from flows.config import ProfileError, load_profile, profile_names
from flows.config.maxtext_keys import pinned_version, unknown_key
from tests.support.profiles import required_overrides

sys.path.insert(0, str(REPO_ROOT / "scripts"))


def test_the_key_file_is_the_pinned_version():
    lock = (REPO_ROOT / "images" / "rehearsal" / "requirements.lock").read_text()
    pinned = re.search(r"^maxtext==(\S+)", lock, re.M)
    assert pinned and pinned_version() == f"maxtext-{pinned.group(1)}"


@pytest.mark.parametrize("name", profile_names())
def test_every_shipped_profile_passes(name: str):
    load_profile(name, required_overrides(name))


@pytest.mark.parametrize(("step", "key", "suggestion"), [
    ("train", "learning_rat", "learning_rate"),
    ("train", "rl.num_generatons", "rl.num_generations"),
    ("model", "base_emb_dimm", "base_emb_dim"),
    ("convert", "scan_layer", "scan_layers"),
    ("export", "weight_dtyp", "weight_dtype"),
    ("convert", "--lazy_load_tensor", "--lazy_load_tensors"),
    ("export", "--override_model_architectur", "--override_model_architecture"),
])
def test_a_misspelled_key_is_refused_with_the_closest_name(step: str, key: str, suggestion: str):
    name = "rehearsal"
    with pytest.raises(ProfileError) as err:
        load_profile(name, {f"{step}.args.{key}": "1"})
    text = str(err.value)
    assert f"{step}.args.{key}" in text and f"did you mean {suggestion}" in text


def test_rules_follow_pyconfig():
    assert unknown_key("learning_rate", "train_rl") is None
    assert unknown_key("num_generations", "train_rl") is None  # a nested model's field, flat
    assert unknown_key("rl.num_generations", "train_rl") is None
    assert unknown_key("batch_size", "train_rl") is None  # rl.yml's, an RLConfig field
    assert unknown_key("rl.num_generations", "checkpoint_conversion") is not None
    assert unknown_key("zzzz", "train_rl") == []


def test_validate_refuses_it_as_a_process():
    done = subprocess.run([str(Path(sys.executable).with_name("tpurl")), "validate",
                           "rehearsal", "--set", "train.args.learning_rat=1e-5"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2
    assert "train.args.learning_rat" in done.stderr and "did you mean learning_rate" in \
        done.stderr
