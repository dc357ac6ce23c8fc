"""Training (and the evaluation that reuses its arguments) and export read the tokenizer at the pinned
``model.hf_revision``, not the hub's default branch: the preamble line the pod
runs downloads it at that revision and ``tokenizer_path`` names the folder. The line is run
here by bash with the recording stand-in of huggingface_hub (tests/fakes/hub_download)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from flows.backends.gke.runtime import TOKENIZER_DIR, GkeRuntime, tokenizer_preamble
from flows.common.paths import REPO_ROOT
from flows.config import load_profile
from flows.core.layout import Layout
from flows.core.programs import export_workload, train_workload
from tests.support.profiles import TUTORIAL, TUTORIAL_REQUIRED

PINNED = "0123456789abcdef0123456789abcdef01234567"


def test_the_train_workload_reads_the_tokenizer_from_the_pinned_download() -> None:
    profile = load_profile(TUTORIAL, {**TUTORIAL_REQUIRED, "model.hf_revision": PINNED},
                           environ={})
    workload = train_workload(profile, Layout(profile), GkeRuntime(profile))
    assert f"tokenizer_path={TOKENIZER_DIR}" in workload.argv
    assert not any(a == f"tokenizer_path={profile.model.hf_repo}" for a in workload.argv)
    assert workload.preamble[-1] == tokenizer_preamble(profile.model.hf_repo, PINNED)


def test_the_export_bundles_the_tokenizer_of_the_pinned_revision() -> None:
    """to_huggingface (MaxText 0.2.4) reads only the tokenizer from --hf_model_path
    (maxtext/checkpoint_conversion/to_huggingface.py: AutoTokenizer.from_pretrained(
    FLAGS.hf_model_path or HF_IDS[model_key]))."""
    profile = load_profile(TUTORIAL, {**TUTORIAL_REQUIRED, "model.hf_revision": PINNED},
                           environ={})
    workload = export_workload(profile, Layout(profile), GkeRuntime(profile), 50)
    flags = [a for a in workload.argv if a.startswith("--hf_model_path=")]
    assert flags == [f"--hf_model_path={TOKENIZER_DIR}"]
    assert workload.preamble == (tokenizer_preamble(profile.model.hf_repo, PINNED),)


def test_the_preamble_downloads_at_the_revision_and_quotes_it_once(tmp_path: Path) -> None:
    hostile = "main; touch " + str(tmp_path / "pwned")
    log, folder = tmp_path / "hub.json", tmp_path / "tok"
    for revision in (PINNED, hostile):
        line = tokenizer_preamble("Qwen/Qwen3-30B-A3B", revision).replace(TOKENIZER_DIR,
                                                                            str(folder))
        bindir = tmp_path / "bin"
        bindir.mkdir(exist_ok=True)
        (bindir / "python3").unlink(missing_ok=True)
        (bindir / "python3").symlink_to(sys.executable)
        env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}",
               "PYTHONPATH": str(REPO_ROOT / "tests" / "fakes" / "hub_download"),
               "TPURL_FAKE_HUB_LOG": str(log)}
        done = subprocess.run(["bash", "-c", line], env=env, capture_output=True, text=True,
                              check=False)
        assert done.returncode == 0, done.stderr
        call = json.loads(log.read_text())
        assert call["repo_id"] == "Qwen/Qwen3-30B-A3B" and call["revision"] == revision
        assert call["local_dir"] == str(folder) and "*.safetensors" not in call["allow_patterns"]
    assert not (tmp_path / "pwned").exists()  # the revision stayed one argument


def test_a_failed_download_stops_the_pod_with_the_reason(tmp_path: Path) -> None:
    line = tokenizer_preamble("Qwen/Qwen3-30B-A3B", PINNED)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}  # no huggingface_hub importable
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "python3").symlink_to(sys.executable)
    env["PATH"] = f"{bindir}:{os.environ['PATH']}"
    done = subprocess.run(["bash", "-c", line + "\necho reached"], env=env, capture_output=True,
                          text=True, check=False)
    assert done.returncode == 1 and "reached" not in done.stdout
    assert "cannot download the tokenizer at model.hf_revision" in done.stderr
