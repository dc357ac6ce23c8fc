"""The stand-in rollout's cached decode (MaxText's autoregressive mode and KV cache) gives the
same greedy tokens as recomputing the whole sequence for every token, on the same weights.

Runs images/rehearsal/decode_check.py in the real rehearsal venv with the rehearsal profile's
own model and train arguments (so a profile change that breaks the cache is caught), on two
decoder layers of random float32 weights instead of 48 to keep it short; and the same for
Gemma 3's profile, whose scanned blocks write their state back inside the decode loops; both
configurations in one process.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from flows.common.paths import REHEARSAL_DIR
from flows.config import load_profile
from flows.core.workload import render_args

# The train arguments that shape the model and the cache; the data and reward keys do not.
DECODE_KEYS = ("scan_layers", "hardware", "skip_jax_distributed_system", "use_pathways",
               "megablox", "sparse_matmul", "max_prefill_predict_length", "max_target_length",
               "batch_size", "rl.num_generations")


# Gemma 3 with seven layers: one scanned block of six (whose call writes the parameters and
# RNG counts back, which the stand-in's loops must carry) and one of the remainder.
CASES = {"rehearsal": 2, "rehearsal-gemma": 7}


def _decode_args(name: str, layers: int) -> list[str]:
    """A profile's model and train arguments for decode_check.py, on LAYERS decoder layers."""
    profile = load_profile(name, environ={})
    train = {k: v for k, v in profile.train.args.items() if k in DECODE_KEYS}
    return [f"model_name={profile.model.maxtext_name}", *render_args(profile.model.args),
            *render_args(train), f"base_num_decoder_layers={layers}",
            # float32: in bfloat16 the two summation orders may flip a near-tie late in a
            # long decode (measured at 48 layers: 13 of 16 tokens equal; 16 in float32)
            "dtype=float32", "weight_dtype=float32"]


@pytest.fixture(scope="module")
def reports(rehearsal_image) -> dict[str, dict]:
    """Every case's report, from ONE decode_check process (its configurations separated by
    ``+``): the imports of MaxText and JAX, most of a case's CPU, are paid once."""
    argv = [str(rehearsal_image.venv_dir() / "bin" / "python"),
            # no timed repeat: the tokens of the first calls are compared (the timings,
            # which a repeat steadies, are benchmarks/rollout.py's)
            str(REHEARSAL_DIR / "decode_check.py"), "--repeats", "0"]
    for i, (name, layers) in enumerate(CASES.items()):
        argv += [*(["+"] if i else []), *_decode_args(name, layers)]
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=1200,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()[-len(CASES):]
    return dict(zip(CASES, (json.loads(line) for line in lines), strict=True))


@pytest.mark.parametrize("name", list(CASES))
def test_cached_decode_gives_the_uncached_tokens(reports: dict[str, dict], name: str) -> None:
    profile = load_profile(name, environ={})
    report = reports[name]
    assert report["tokens_equal"], report
    assert report["distinct_tokens"] > 1, report  # a constant output would prove nothing
    assert report["tokens"] == (int(profile.train.args["max_target_length"])
                                - int(profile.train.args["max_prefill_predict_length"]))


def test_decode_check_refuses_an_empty_configuration(rehearsal_image) -> None:
    """A ``+`` with nothing after it would check MaxText's defaults, not a profile's model:
    refused before any model is built."""
    done = subprocess.run([str(rehearsal_image.venv_dir() / "bin" / "python"),
                           str(REHEARSAL_DIR / "decode_check.py"), *_decode_args("rehearsal", 1),
                           "+"], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode != 0
    assert "an empty configuration" in done.stderr


def test_the_rollout_benchmark_decodes_both_ways(rehearsal_image) -> None:
    """benchmarks/rollout.py's quick run (one layer, one timed repeat): both MoE paths, each
    cached and uncached, decode tokens (the benchmark exits 1 otherwise)."""
    from tests.support.benchmarks import assert_figures, run_quick

    out = run_quick("rollout", "--quick", timeout=1200)
    assert_figures(out, "previous main: no cache, sparse MoE", "this branch: KV cache, dense MoE",
                   "greedy tokens cached = uncached")
