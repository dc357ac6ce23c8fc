"""Each family's tiny checkpoint, written in the rehearsal venv, against MaxText's own tables.

The builder (images/rehearsal/make_tiny_model.py) needs ml_dtypes, safetensors, the maxtext
wheel's tokenizers and (for Llama) transformers' tiktoken converter: all in the rehearsal venv,
which the `rehearsal_image` fixture builds with the real image stage when it is missing. One
program there writes every family twice and reads MaxText 0.2.4's tables
(checkpoint_conversion/utils/hf_shape.py, param_mapping.py): the same seed gives the same
bytes, every tensor has the name and shape MaxText's HF shape table gives for the shrunk
config (Gemma 3: its text model, as use_multimodal=false reads it), and the converter's
parameter map reads every one of them.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from flows.common.paths import REHEARSAL_DIR
from flows.config.rehearsal_models import REHEARSAL_MODELS

PROGRAM = r"""
import filecmp, json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import make_tiny_model as b
from maxtext.checkpoint_conversion.utils.hf_model_configs import HF_MODEL_CONFIGS
from maxtext.checkpoint_conversion.utils.hf_shape import HF_SHAPE
from maxtext.checkpoint_conversion.utils.param_mapping import PARAM_MAPPING
from safetensors import safe_open

def flat(v):
    if isinstance(v, str):
        yield v
    elif isinstance(v, (list, tuple)):
        for x in v:
            yield from flat(x)

out, report = Path(sys.argv[2]), {}
for name in sys.argv[3:]:
    fam = b.FAMILIES[name]
    first, second = out / name / "a", out / name / "b"
    b.write_model(first, 0, name)
    b.write_model(second, 0, name)
    files = sorted(p.name for p in first.iterdir())
    same, differ, missing = filecmp.cmpfiles(first, second, files, shallow=False)
    written = {}
    for shard in first.glob("*.safetensors"):
        with safe_open(str(shard), "np") as f:
            for key in f.keys():
                written[key] = list(f.get_slice(key).get_shape())
    shapes = HF_SHAPE[name](dict(fam.config))
    if fam.tied_embeddings:
        shapes.pop("lm_head.weight")
    # use_multimodal=false: the converter reads no vision tensor; and the shape table lists
    # biases the config turns off (attention_bias false)
    shapes = {k: v for k, v in shapes.items() if "vision_tower" not in k
              and "multi_modal_projector" not in k and not k.endswith(".bias")}
    mapped = {k for v in PARAM_MAPPING[name](HF_MODEL_CONFIGS[name].to_dict(), None, True).values()
              for k in flat(v)}
    report[name] = {"files": len(files), "differ": differ + missing,
                    "written_not_shaped": sorted(set(written) - set(shapes))[:5],
                    "shaped_not_written": sorted(set(shapes) - set(written))[:5],
                    "wrong_shape": sorted(k for k in written if k in shapes and written[k] != shapes[k])[:5],
                    "not_mapped": sorted(set(written) - mapped)[:5],
                    "tokenizer": sorted(p.name for p in first.glob("tokenizer*"))}
print(json.dumps(report))
"""


@pytest.fixture(scope="module")
def report(rehearsal_image, tmp_path_factory) -> dict:
    python = rehearsal_image.venv_dir() / "bin" / "python"
    out = tmp_path_factory.mktemp("tiny-models")
    done = subprocess.run([str(python), "-c", PROGRAM, str(REHEARSAL_DIR), str(out),
                           *REHEARSAL_MODELS], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", sorted(REHEARSAL_MODELS))
def test_the_same_seed_writes_the_same_bytes(report, name):
    assert report[name]["files"] > 3 and report[name]["differ"] == []


@pytest.mark.parametrize("name", sorted(REHEARSAL_MODELS))
def test_names_and_shapes_are_maxtexts(report, name):
    entry = report[name]
    assert entry["written_not_shaped"] == entry["shaped_not_written"] == []
    assert entry["wrong_shape"] == []
    assert entry["not_mapped"] == []


@pytest.mark.parametrize("name", sorted(REHEARSAL_MODELS))
def test_autotokenizer_finds_its_files(report, name):
    assert {"tokenizer.json", "tokenizer_config.json"} <= set(report[name]["tokenizer"])
