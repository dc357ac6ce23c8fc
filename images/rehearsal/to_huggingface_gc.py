"""Run MaxText's ``to_huggingface`` unchanged, with the imports moved out of the garbage
collector's way.

Why: ``to_huggingface`` calls ``gc.collect()`` after every parameter it converts (15 for
Qwen3-MoE, and once more when saving) so that a 30B export frees host memory as it goes.
A full collection walks every object the process holds, and the imports (tensorflow, jax,
transformers, MaxText) leave millions of them: each call took 0.7-0.9 s on the rehearsal's
2 cores, 11-14 s of a ~50 s export spent re-proving that module objects are alive.
``gc.freeze()`` after the imports moves those objects to the permanent generation, so each
collection walks only what the conversion itself created; what it frees is the same. The
collector is off while importing, where nothing is garbage to find.

TensorFlow is left unimported, as by the training launcher (``train_rl_cpu.py``,
``leave_tensorflow_out``, which says why): MaxText imports it for its ``tf.data`` loaders
only, guarded for its absence, and the converter writes with transformers and safetensors.
2 CPU-s less an export, byte-identical files.

Nothing else differs from ``python -m maxtext.checkpoint_conversion.to_huggingface ARGS``:
the module runs as ``__main__`` through runpy with the same argv, so its own start-up (PRNG
implementation, CPU platform, ``XLA_FLAGS``), its absl flags and its ``main`` are MaxText's.
Only modules the converter imports anyway are imported here, and not the converter itself
(its absl flags must be defined once, when runpy runs it).
"""

from __future__ import annotations

import gc
import importlib
import runpy
import sys

MODULE = "maxtext.checkpoint_conversion.to_huggingface"
# What MODULE imports at its top (MaxText 0.2.4), the converter excluded.
DEPENDENCIES = (
    "jax",
    "jax.numpy",
    "transformers",
    "absl.app",
    "maxtext.configs.pyconfig",
    "maxtext.checkpoint_conversion.utils.param_mapping",
    "maxtext.checkpoint_conversion.utils.hf_shape",
    "maxtext.checkpoint_conversion.utils.hf_model_configs",
    "maxtext.checkpoint_conversion.utils.utils",
    "maxtext.utils.max_logging",
    "maxtext.utils.max_utils",
    "maxtext.utils.globals",
    "maxtext.utils.lora_utils",
    "maxtext.utils.model_creation_utils",
)


def main() -> None:
    """Import the converter's dependencies, freeze them, run the converter as ``-m`` would."""
    gc.disable()
    sys.modules.setdefault("tensorflow", None)  # see the module docstring
    for name in DEPENDENCIES:
        importlib.import_module(name)
    gc.enable()
    gc.freeze()
    runpy.run_module(MODULE, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
