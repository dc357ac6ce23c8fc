"""Generate flows/config/maxtext_models.json: the models the pinned MaxText converts both ways.

Usage: python scripts/maxtext_models.py PATH   (a maxtext-X.whl, or a directory holding the
``maxtext/`` package, e.g. an unpacked wheel or a venv's site-packages)

Why a generated file: like maxtext_keys.json (scripts/maxtext_keys.py), `tpurl validate` must
answer in a second without MaxText (it pulls JAX), and the answer must be the pinned
version's, not a list typed by hand.

What makes a model convertible both ways in MaxText 0.2.4:
- checkpoint_conversion/to_maxtext.py refuses a ``model_name`` missing from
  ``utils/globals.py HF_IDS`` and reads ``HF_MODEL_CONFIGS`` (utils/hf_model_configs.py),
  ``PARAM_MAPPING`` and ``HOOK_FNS`` (utils/param_mapping.py) under that name;
- checkpoint_conversion/to_huggingface.py refuses it unless it is in ``PARAM_MAPPING``,
  ``HF_SHAPE`` (utils/hf_shape.py) and ``HOOK_FNS``, and reads ``HF_MODEL_CONFIGS`` and
  ``HF_IDS``;
- train_rl and both conversions load ``configs/models/<name>.yml`` for its architecture.
A model is listed when all six hold. The dictionaries are read with ``ast`` (the modules
import transformers and JAX); each entry keeps the HF config object's variable and class the
converter maps it to, HF_IDS's repository, and its architecture numbers: the model's YAML over
configs/base.yml's defaults (the merge pyconfig makes), so a number the model file leaves out
is the one MaxText would use.
"""

from __future__ import annotations

import ast
import json
import sys
import zipfile
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from maxtext_keys import _sha256  # the wheel RECORD's digest form, shared with the keys file

UTILS = "maxtext/checkpoint_conversion/utils/"
DICT_FILES = {"HF_MODEL_CONFIGS": UTILS + "hf_model_configs.py",
              "PARAM_MAPPING": UTILS + "param_mapping.py", "HOOK_FNS": UTILS + "param_mapping.py",
              "HF_SHAPE": UTILS + "hf_shape.py", "HF_IDS": "maxtext/utils/globals.py"}
BASE_YML = "maxtext/configs/base.yml"
RL_YML = "maxtext/configs/post_train/rl.yml"
# train_rl's defaults the fit estimate reads when train.args leaves them out (rl.yml over
# base.yml, the order pyconfig loads them in)
RL_DEFAULTS = ("weight_dtype", "dtype", "hbm_utilization_vllm", "trainer_devices_fraction",
               "sampler_devices_fraction", "chips_per_vm", "num_trainer_slices",
               "num_samplers_slices", "use_pathways", "batch_size", "train_micro_batch_size",
               "rollout_micro_batch_size", "max_target_length", "max_prefill_predict_length",
               "kv_cache_buffer", "rl.num_generations", "remat_policy")
MODELS_DIR = "maxtext/configs/models/"
# the architecture numbers the fit estimate (flows/config/fit.py) reads, at their base.yml names
ARCHITECTURE = ("decoder_block", "base_emb_dim", "base_num_decoder_layers",
                "base_num_query_heads", "base_num_kv_heads", "head_dim", "base_mlp_dim",
                "base_moe_mlp_dim", "num_experts", "num_experts_per_tok", "shared_experts",
                "first_num_dense_layers", "vocab_size", "dtype", "weight_dtype",
                "logits_via_embedding", "mlp_activations", "attention_type", "attention_bias",
                "use_qk_norm", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim",
                "qk_rope_head_dim", "v_head_dim")
OUT = Path(__file__).resolve().parents[1] / "flows" / "config" / "maxtext_models.json"


def _read(source: Path) -> tuple[dict[str, bytes], str]:
    """Every file the listing depends on, by its path inside the wheel, and the version."""
    wanted = set(DICT_FILES.values()) | {BASE_YML, RL_YML}
    if source.is_file():
        with zipfile.ZipFile(source) as wheel:
            names = wheel.namelist()
            version = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
            files = {n: wheel.read(n) for n in names
                     if n in wanted or (n.startswith(MODELS_DIR) and n.endswith(".yml"))}
            return files, version.removesuffix(".dist-info")
    info = next(source.glob("maxtext-*.dist-info"), None)
    version = info.name.removesuffix(".dist-info") if info else "maxtext-unknown"
    files = {f: (source / f).read_bytes() for f in wanted}
    for yml in sorted((source / MODELS_DIR).glob("*.yml")):
        files[MODELS_DIR + yml.name] = yml.read_bytes()
    return files, version


def _module_dict(source: bytes, name: str) -> dict[str, str]:
    """The top-level ``NAME = {"key": value, ...}`` of a module: key → the value's source."""
    for node in ast.parse(source).body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name) and node.targets[0].id == name
                and isinstance(node.value, ast.Dict)):
            return {k.value: ast.unparse(v) for k, v in zip(node.value.keys, node.value.values,
                                                              strict=True)
                    if isinstance(k, ast.Constant) and isinstance(k.value, str)}
    raise ValueError(f"{name} is not a dict literal at the top of its module")


def _config_classes(source: bytes) -> dict[str, str]:
    """``var = transformers.XConfig(...)`` assignments: variable → ``XConfig``."""
    found = {}
    for node in ast.parse(source).body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name) and isinstance(node.value, ast.Call)):
            found[node.targets[0].id] = ast.unparse(node.value.func).rpartition(".")[2]
    return found


def build(source: Path) -> dict:
    files, version = _read(source)
    tables = {name: _module_dict(files[path], name) for name, path in DICT_FILES.items()}
    classes = _config_classes(files[DICT_FILES["HF_MODEL_CONFIGS"]])
    base = yaml.safe_load(files[BASE_YML])
    models = {}
    for name in sorted(set.intersection(*(set(t) for t in tables.values()))):
        yml = files.get(f"{MODELS_DIR}{name}.yml")
        if yml is None:
            continue
        merged = {**base, **(yaml.safe_load(yml) or {})}
        config_var = tables["HF_MODEL_CONFIGS"][name]
        models[name] = {
            "hf_repo": ast.literal_eval(tables["HF_IDS"][name]),
            "hf_config": config_var,
            "hf_config_class": classes.get(config_var, "unknown"),
            "architecture": {k: merged.get(k) for k in ARCHITECTURE},
        }
    rl = {**base, **yaml.safe_load(files[RL_YML])}
    rl_defaults = {k: (rl["rl"].get(k.partition(".")[2]) if k.startswith("rl.") else rl.get(k))
                   for k in RL_DEFAULTS}
    used = sorted(set(DICT_FILES.values()) | {BASE_YML, RL_YML}
                  | {f"{MODELS_DIR}{n}.yml" for n in models})
    return {
        "provenance": {
            "package": version,
            "generated_by": "scripts/maxtext_models.py",
            "files": {f: f"sha256={_sha256(files[f])}" for f in used},
        },
        "models": models,
        "rl_defaults": rl_defaults,
    }


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    data = build(Path(sys.argv[1]))
    OUT.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(f"wrote {OUT} from {data['provenance']['package']}: {len(data['models'])} models")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
