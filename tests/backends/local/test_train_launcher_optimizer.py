"""The CPU training launcher's optimizer (images/rehearsal/train_rl_cpu.py
``float32_hyperparams``, decision 0044), with MaxText's own ``utils_rl.get_optimizer`` in the
rehearsal venv: after one update the optimizer state has the same types and shapes as before
it, so Tunix's jitted train step meets the same signature at step 2 and compiles once; the
update's numbers are MaxText's own. Without the wrapper the learning rate goes bfloat16 →
float32 (the second compile this prevents), which the test shows too, so an upstream change
that ends the mismatch, or moves it elsewhere in the state, is seen here. The launcher's
``freeze_imports`` is checked here too, in the orchestrator's Python (it needs no venv)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from flows.common.paths import REHEARSAL_DIR

PROGRAM = r"""
import json, sys, types
sys.path.insert(0, sys.argv[1])
import multiprocessing.pool  # utils_rl needs it imported (train_rl_cpu.py, point 1)
import jax, jax.numpy as jnp
from maxtext.trainers.post_train.rl import utils_rl
from train_rl_cpu import float32_hyperparams

# the fields get_optimizer reads, with the rehearsal profile's shape: no warmup, clipping on
config = types.SimpleNamespace(learning_rate=3e-6, train_steps=2, steps=2,
                               learning_rate_schedule_steps=-1, warmup_steps_fraction=0.0,
                               gradient_clipping_threshold=1.0)
params = {"w": jnp.linspace(-1, 1, 8, dtype=jnp.bfloat16).reshape(2, 4),
          "b": jnp.ones((4,), jnp.bfloat16)}
grads = jax.tree.map(lambda p: (p.astype(jnp.float32) * 0.5 + 0.25), params)

def signature(tree):
    return [f"{jax.tree_util.keystr(path)}:{leaf.dtype}{list(leaf.shape)}"
            for path, leaf in jax.tree_util.tree_leaves_with_path(tree)]

report = {}
for name, get in (("maxtext", utils_rl.get_optimizer),
                  ("launcher", float32_hyperparams(utils_rl.get_optimizer))):
    optimizer = get(config)
    state = optimizer.init(params)
    updates, after = optimizer.update(grads, state, params)
    report[name] = {"before": signature(state), "after": signature(after),
                    "updates": [float(x) for leaf in jax.tree.leaves(updates)
                                for x in leaf.astype(jnp.float32).ravel()]}
print(json.dumps(report))
"""


@pytest.fixture(scope="module")
def report(rehearsal_image) -> dict:
    python = rehearsal_image.venv_dir() / "bin" / "python"
    done = subprocess.run([str(python), "-c", PROGRAM, str(REHEARSAL_DIR)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_launchers_optimizer_state_keeps_its_signature_across_an_update(report):
    launcher = report["launcher"]
    assert launcher["before"] == launcher["after"], (launcher["before"], launcher["after"])


def test_maxtexts_own_optimizer_changes_its_learning_rates_dtype(report):
    """What the launcher mends: the one leaf that differs is the injected learning rate."""
    before, after = report["maxtext"]["before"], report["maxtext"]["after"]
    changed = [(b, a) for b, a in zip(before, after, strict=True) if b != a]
    assert len(changed) == 1 and "learning_rate" in changed[0][0], changed
    assert changed[0][0].endswith(":bfloat16[]") and changed[0][1].endswith(":float32[]")


def test_the_update_is_maxtexts_own(report):
    assert report["launcher"]["updates"] == report["maxtext"]["updates"]
    assert any(report["launcher"]["updates"])  # a real step, not a zero update


FREEZE = r"""
import gc, json, sys, weakref
sys.path.insert(0, sys.argv[1])
from train_rl_cpu import freeze_imports

gc.disable()  # as the launcher's main() does before its imports
imported = [[] for _ in range(1000)]  # what the imports leave
freeze_imports()

class Node: pass
cycle = Node(); cycle.self = cycle
gone = weakref.ref(cycle)
del cycle
freed = gc.collect()
print(json.dumps({"enabled": gc.isenabled(), "frozen": gc.get_freeze_count(),
                  "cycle_freed": gone() is None and freed > 0}))
"""


def test_the_launcher_freezes_its_imports_and_collects_what_comes_after():
    """The launcher's ``freeze_imports`` (images/rehearsal/train_rl_cpu.py): the collector is
    on again after the imports, what they left is frozen, and a cycle made after them (as
    the models' arrays are) is still freed by a collection such as Tunix's."""
    done = subprocess.run([sys.executable, "-c", FREEZE, str(REHEARSAL_DIR)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["enabled"] and report["frozen"] >= 1000 and report["cycle_freed"], report
