"""Run MaxText's ``to_huggingface`` with the imports moved out of the garbage collector's way
and its parameters sliced on the host.

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

Each parameter reaches MaxText's slicing as a host (numpy) array: see :func:`slice_on_host`.

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
import types
from typing import Any

from train_rl_cpu import leave_tensorflow_out  # beside this file, as under `python FILE`

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


CONVERSION_UTILS = "maxtext.checkpoint_conversion.utils.utils"


def slice_on_host() -> None:
    """Give MaxText's converter each parameter as a numpy array, sliced by numpy.

    Why: ``process_maxtext_param`` (MaxText's ``checkpoint_conversion/utils/utils.py``) cuts
    every stacked parameter into its Hugging Face tensors with ``jax.lax.index_in_dim``, one
    call per layer (and per expert, then layer, for a mixture of experts), runs the mapping's
    hooks on each piece (``.T``, ``.reshape``, ``.transpose``: methods numpy arrays have too)
    and copies it to numpy. On CPU every eager slice is a dispatched XLA program: 18,432 of
    them for the tiny Qwen3-MoE (128 experts x 48 layers x 3 matrices), about 10 of an
    export's 16 CPU-s.

    Here ``process_maxtext_param`` receives the parameter as the numpy array it would copy
    each piece to anyway, and ``index_in_dim`` of a numpy array, in that module only, is
    numpy's ``take`` of the same index and axis (the same elements; ``keepdims`` as JAX's);
    any other array still goes to JAX. MaxText's loops, indices, hooks, shape checks and
    dtype casts run as written. Measured on the rehearsal's trained Qwen3-MoE checkpoint:
    6.3 CPU-s against 16.0, byte-identical files; decision 0047 has every family's.
    """
    import jax
    import numpy as np

    conversion = importlib.import_module(CONVERSION_UTILS)

    def index_in_dim(operand: Any, index: int, axis: int = 0, keepdims: bool = True) -> Any:
        if not isinstance(operand, np.ndarray):
            return jax.lax.index_in_dim(operand, index, axis, keepdims)
        taken = np.take(operand, index, axis=axis)
        return np.expand_dims(taken, axis) if keepdims else taken

    class HostLax(types.ModuleType):
        """``jax.lax`` as the conversion module sees it: its own ``index_in_dim``."""

        def __getattr__(self, name: str) -> Any:
            return getattr(jax.lax, name)

    class HostJax(types.ModuleType):
        """``jax`` as the conversion module sees it: everything JAX's but ``lax``."""

        def __getattr__(self, name: str) -> Any:
            return getattr(jax, name)

    lax = HostLax("jax.lax")
    lax.index_in_dim = index_in_dim  # type: ignore[attr-defined]
    host_jax = HostJax("jax")
    host_jax.lax = lax  # type: ignore[attr-defined]
    conversion.jax = host_jax
    process = conversion.process_maxtext_param

    def on_host(key: Any, weight: Any, *rest: Any, **named: Any) -> Any:
        host = ([None if w is None else np.asarray(w) for w in weight] if isinstance(weight, list)
                else np.asarray(weight))
        return process(key, host, *rest, **named)

    # the converter's `from ... import process_maxtext_param` runs after this, under runpy
    conversion.process_maxtext_param = on_host


def main() -> None:
    """Import the converter's dependencies, freeze them, slice on the host, run the converter
    as ``-m`` would."""
    gc.disable()
    leave_tensorflow_out()
    for name in DEPENDENCIES:
        importlib.import_module(name)
    slice_on_host()
    gc.enable()
    gc.freeze()
    runpy.run_module(MODULE, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
