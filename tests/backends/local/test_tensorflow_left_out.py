"""The rehearsal's MaxText programs run without TensorFlow (images/rehearsal/train_rl_cpu.py
``leave_tensorflow_out``): the export launcher's start-up, in the rehearsal venv that has
TensorFlow installed, leaves it unimported, and MaxText's loader module, which imports it
for one error type of its ``tf.data`` loaders, takes its own no-TensorFlow path. The
evaluation's start-up is checked by tests/backends/local/test_evaluate_flags.py, the
training's by the end-to-end run's logs (tests/e2e/test_rehearsal_e2e.py)."""

from __future__ import annotations

import json
import subprocess

from flows.common.paths import REHEARSAL_DIR

EXPORT_START = """
import importlib.machinery, json, sys
sys.path.insert(0, {dir!r})
import to_huggingface_gc
ran = []
to_huggingface_gc.runpy.run_module = lambda name, **kwargs: ran.append(name)  # not converted
to_huggingface_gc.main()
import maxtext.input_pipeline.multihost_dataloading as loading
print(json.dumps({{"installed": importlib.machinery.PathFinder.find_spec("tensorflow") is not None,
                   "refused": "tensorflow" in sys.modules and sys.modules["tensorflow"] is None,
                   "maxtext_without": loading.tf is None and loading._TF_RETRYABLE_ERRORS == (),
                   "ran": ran}}))
"""


def test_the_export_starts_maxtexts_converter_without_tensorflow(rehearsal_image) -> None:
    python = str(rehearsal_image.venv_dir() / "bin" / "python")
    done = subprocess.run([python, "-c", EXPORT_START.format(dir=str(REHEARSAL_DIR))],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["installed"], "the venv has no TensorFlow: this check would prove nothing"
    assert seen["refused"] and seen["maxtext_without"], seen
    assert seen["ran"] == ["maxtext.checkpoint_conversion.to_huggingface"], seen
