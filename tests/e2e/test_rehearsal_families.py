"""The rehearsal of each other conversion family, for real: Qwen3 dense, Llama 3.1, Gemma 3.

MaxText's converters map each family's checkpoint differently (Qwen3 dense ties its output
head to the embedding and normalises queries and keys per head; Llama has neither; Gemma 3's
text model sits inside a multimodal checkpoint, with sandwich norms stored as scale - 1, a
scaled embedding, and layers scanned in blocks of six plus a remainder), so the rehearsal of
Qwen3-MoE (tests/e2e/test_rehearsal_e2e.py) proves nothing of them. Each family's profile
(deployments/profiles/rehearsal-llama.yaml, rehearsal-gemma.yaml, rehearsal-qwen3.yaml) runs
through the flow: infra builds the tiny model, then MaxText's real to_maxtext, two GRPO steps
of train_rl and to_huggingface, and transformers loads the export as the family's class.

Llama runs here and Gemma 3 in tests/e2e/test_rehearsal_gemma.py, once each. Qwen3 dense is
the profile of the interrupted CLI (tests/e2e/test_cli_interrupts.py), whose last run
completes every stage of it: the same checks (`assert_family_outputs`) read what that run
left in its root instead of a third pipeline converting, training and exporting the same
tiny model again (about 46 CPU-s on 2 cores).

What is left out, and why: the evaluation (its programs are the Qwen3-MoE module's, and a
family changes nothing in them but the model, which train already ran) and any rerun (skip-
if-done does not depend on the family). The image stage is shared: both profiles use the
rehearsal's venvs, whose record the first run leaves. The model keeps its real layer count:
to_maxtext maps from MaxText's built-in table (hf_model_configs.py), whose
``num_hidden_layers`` no argument overrides, so a ``base_num_decoder_layers=2`` model cannot be
converted (docs/tutorials/rehearsal.md, "Other model families").
"""

from __future__ import annotations

import json
import resource
import time
from pathlib import Path
from urllib.parse import urlparse

import pytest

from flows.config.rehearsal_models import REHEARSAL_MODELS
from flows.core.layout import Layout
from flows.pipeline import rl_post_training
from flows.run.result import PipelineResult
from tests.support.results import stage_statuses

pytestmark = pytest.mark.rehearsal

NO_EVAL = {"eval": "", "promotion": "", "watch": ""}
FAMILIES = {"rehearsal-qwen3": "qwen3-0.6b", "rehearsal-llama": "llama3.1-8b",
            "rehearsal-gemma": "gemma3-4b"}


def _path(uri: str) -> Path:
    return Path(urlparse(uri).path)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_family(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
               profile: str) -> tuple[str, PipelineResult]:
    """One run of the family's profile in a root of its own; its wall and CPU seconds (the
    programs are this process's children) are written to the lane's log."""
    root = tmp_path_factory.mktemp(profile)
    wall, cpu = time.monotonic(), _children_cpu()
    result = rl_post_training(profile=profile, overrides={"local.root": str(root), **NO_EVAL})
    capture = request.config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled():  # into the lane's log, past pytest's capture
        print(f"\n{profile} ({FAMILIES[profile]}): wall {time.monotonic() - wall:.0f} s, "
              f"programs' CPU {_children_cpu() - cpu:.0f} s", flush=True)
    return profile, result


# Gemma 3 costs nearly as much as the other two together (its 262k vocabulary and scanned
# blocks):
# tests/e2e/test_rehearsal_gemma.py runs it with these tests, so that scripts/test.sh can
# give it an e2e lane of its own share.
@pytest.fixture(scope="module", params=["rehearsal-llama"])
def family_run(request, prefect_api, tmp_path_factory) -> tuple[str, PipelineResult]:
    return run_family(request, tmp_path_factory, request.param)


def assert_trained_two_steps(trained_checkpoint: Path) -> None:
    assert trained_checkpoint.match("checkpoints/actor/2/model_params"), trained_checkpoint
    assert any(trained_checkpoint.iterdir()), f"{trained_checkpoint} is empty"


def assert_the_familys_structure(profile: str, tiny_model: Path) -> None:
    config = json.loads((tiny_model / "config.json").read_text())
    assert config["model_type"] == REHEARSAL_MODELS[FAMILIES[profile]].model_type
    assert config.get("text_config", config)["hidden_size"] == 64


def assert_loads_as_the_familys_class(profile: str, export: Path) -> None:
    record = json.loads((export / "tpurl-lineage.json").read_text())
    check = record["details"]["load_check"]
    assert check["architecture"] == REHEARSAL_MODELS[FAMILIES[profile]].hf_class
    assert check["generated_tokens"] >= 1
    assert 0 < check["tensors_changed"] <= check["tensors_total"]


def assert_family_outputs(profile: str, layout: Layout) -> None:
    """The family's proof from what a run of ``profile`` left in its output root, whichever
    runs made it: the tiny model of the family's structure, the second GRPO step's
    checkpoint, and the export loaded as the family's class with trained weights."""
    assert_the_familys_structure(profile, _path(layout.tiny_model_dir))
    assert_trained_two_steps(_path(layout.actor_params(2)))
    assert_loads_as_the_familys_class(profile, _path(layout.export_dir))


def test_every_stage_but_evaluation_ran(family_run):
    _, result = family_run
    statuses = stage_statuses(result)
    assert [s.stage for s in result.stages] == ["image", "infra", "convert", "train", "export"]
    assert all(statuses[s] == "ran" for s in ("infra", "convert", "train", "export"))
    assert_trained_two_steps(_path(result.artifacts["trained_checkpoint"]))


def test_the_tiny_model_is_the_familys_structure(family_run):
    profile, result = family_run
    infra = next(s for s in result.stages if s.stage == "infra")
    assert_the_familys_structure(profile, _path(infra.uris["hf_model"]))


def test_the_export_loads_as_the_familys_class_with_trained_weights(family_run):
    profile, result = family_run
    export = next(s for s in result.stages if s.stage == "export")
    assert_loads_as_the_familys_class(profile, _path(export.uris["hf_export"]))
