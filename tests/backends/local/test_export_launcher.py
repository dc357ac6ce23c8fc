"""The rehearsal's export launcher (images/rehearsal/to_huggingface_gc.py) in the rehearsal
venv, with MaxText's converter module stubbed out of the run: its start-up leaves
TensorFlow, installed there, unimported (``leave_tensorflow_out`` in train_rl_cpu.py says
why) and MaxText's loader module takes its own no-TensorFlow path; and MaxText's
``process_maxtext_param`` slices on the host (``slice_on_host``), giving the same tensors,
names, dtypes and bytes as MaxText's own on JAX arrays, for a parameter scanned over layers
and one stacked over experts and layers, each with a hook. One process for both: MaxText's
imports are most of its cost. The evaluation's start-up is checked by
tests/backends/local/test_evaluate_flags.py, the training's by the end-to-end run's logs
(tests/e2e/test_rehearsal_e2e.py)."""

from __future__ import annotations

import json
import subprocess

import pytest

from flows.common.paths import REHEARSAL_DIR

EXPORT_START = """
import importlib.machinery, importlib.util, json, sys, types
sys.path.insert(0, {dir!r})
import to_huggingface_gc
ran = []
to_huggingface_gc.runpy.run_module = lambda name, **kwargs: ran.append(name)  # not converted
to_huggingface_gc.main()
import maxtext.input_pipeline.multihost_dataloading as loading
import maxtext.checkpoint_conversion.utils.utils as conversion
# MaxText's own, as it is without the launcher: a second copy of its module, untouched
spec = importlib.util.find_spec(conversion.__name__)
untouched = importlib.util.module_from_spec(spec)
spec.loader.exec_module(untouched)
maxtexts = untouched.process_maxtext_param
import jax, jax.numpy as jnp, numpy as np

config = types.SimpleNamespace(scan_layers=True, param_scan_axis=1, weight_dtype="bfloat16")
scanned = (jnp.arange(4 * 3 * 5, dtype=jnp.float32).reshape(4, 3, 5) / 7).astype(jnp.bfloat16)
layers = [f"layers.{{i}}.w" for i in range(3)]
experts = (jnp.arange(2 * 3 * 4 * 5, dtype=jnp.float32).reshape(2, 3, 4, 5) / 3).astype(
    jnp.bfloat16)
grid = [[f"layers.{{j}}.experts.{{e}}.w" for j in range(3)] for e in range(2)]
cases = {{
    "scanned": ("s", scanned, {{"s": layers}}, {{"s": lambda x, shape: x.T}},
                {{p: [5, 4] for p in layers}}),
    "experts": ("e", experts, {{"e": grid}}, {{"e": lambda x, shape: x.transpose(1, 0)}},
                {{p: [5, 4] for row in grid for p in row}}),
}}
same, jax_slices = {{}}, []
real_slice = jax.lax.index_in_dim
def counted(*args, **named):
    jax_slices.append(1)
    return real_slice(*args, **named)
for name, (key, weight, paths, hooks, shapes) in cases.items():
    theirs = maxtexts(key, weight, paths, hooks, shapes, config)
    jax.lax.index_in_dim = counted  # what ours still asks JAX to slice
    ours = conversion.process_maxtext_param(key, weight, paths, hooks, shapes, config)
    jax.lax.index_in_dim = real_slice
    same[name] = len(ours) == len(theirs) > 1 and all(
        a[0] == b[0] and type(b[1]) is np.ndarray and a[1].dtype == b[1].dtype
        and a[1].shape == b[1].shape and a[1].tobytes() == b[1].tobytes()
        for a, b in zip(theirs, ours))
lax = conversion.jax.lax
print(json.dumps({{"installed": importlib.machinery.PathFinder.find_spec("tensorflow") is not None,
                   "refused": "tensorflow" in sys.modules and sys.modules["tensorflow"] is None,
                   "maxtext_without": loading.tf is None and loading._TF_RETRYABLE_ERRORS == (),
                   "ran": ran, "same": same, "jax_slices": len(jax_slices),
                   "host_slice": type(lax.index_in_dim(np.ones((2, 3)), 1, 0, False)).__name__,
                   "kept_dim": list(lax.index_in_dim(np.ones((2, 3)), 1, 1).shape),
                   "jax_slice": isinstance(lax.index_in_dim(jnp.ones((2, 3)), 1, 0, False),
                                           jax.Array),
                   "jax_elsewhere": jax.lax.index_in_dim is not lax.index_in_dim
                                    and untouched.jax is jax}}))
"""


@pytest.fixture(scope="module")
def started(rehearsal_image) -> dict:
    python = str(rehearsal_image.venv_dir() / "bin" / "python")
    done = subprocess.run([python, "-c", EXPORT_START.format(dir=str(REHEARSAL_DIR))],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_export_starts_maxtexts_converter_without_tensorflow(started: dict) -> None:
    assert started["installed"], "the venv has no TensorFlow: this check would prove nothing"
    assert started["refused"] and started["maxtext_without"], started
    assert started["ran"] == ["maxtext.checkpoint_conversion.to_huggingface"], started


def test_maxtexts_slicing_on_the_host_gives_its_own_tensors(started: dict) -> None:
    assert started["same"] == {"scanned": True, "experts": True}, started
    assert started["jax_slices"] == 0, started  # every slice was numpy's


def test_only_the_converters_numpy_slices_leave_jax(started: dict) -> None:
    """A numpy array is sliced by numpy (``keepdims`` as JAX's), a JAX array by JAX, and
    nothing outside MaxText's conversion module sees the change."""
    assert started["host_slice"] == "ndarray" and started["kept_dim"] == [2, 1], started
    assert started["jax_slice"] and started["jax_elsewhere"], started
