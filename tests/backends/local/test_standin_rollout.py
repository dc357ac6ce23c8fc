"""The stand-in rollout's cached decode (MaxText's autoregressive mode and KV cache) gives the
same greedy tokens as recomputing the whole sequence for every token, on the same weights.

Runs images/rehearsal/decode_check.py in the real rehearsal venv with the rehearsal profile's
own model and train arguments (so a profile change that breaks the cache is caught), on two
decoder layers of random float32 weights instead of 48 to keep it short; and the same for
Gemma 3's profile, whose scanned blocks write their state back inside the decode loops. The
rehearsal profile's case is also the dense half of benchmarks/rollout.py's quick run, whose
sparse half rides in the same process: every configuration in one process, MaxText's and
JAX's imports (17 CPU-s) paid once and no configuration compiled twice.
"""

from __future__ import annotations

import subprocess

import pytest

from benchmarks import rollout
from flows.common.paths import REHEARSAL_DIR
from flows.config import load_profile
from tests.support.benchmarks import assert_figures

# Gemma 3 with seven layers: one scanned block of six (whose call writes the parameters and
# RNG counts back, which the stand-in's loops must carry) and one of the remainder.
GEMMA_LAYERS = 7
CASES = ("rehearsal", "rehearsal-gemma")
SPARSE = "rehearsal, sparse MoE"  # the benchmark's previous-main configuration


@pytest.fixture(scope="module")
def reports(rehearsal_image) -> dict[str, dict]:
    """Every configuration's report, from ONE decode_check process with no timed repeat (the
    tokens of the first calls are compared; the speeds of a quick run are never asserted)."""
    sparse, dense = rollout.quick_configurations()
    runs = {"rehearsal": dense,
            "rehearsal-gemma": rollout.decode_args("rehearsal-gemma", GEMMA_LAYERS,
                                                   *rollout.FLOAT32),
            SPARSE: sparse}
    done = rollout.measure(list(runs.values()), repeats=0,
                           python=rehearsal_image.venv_dir() / "bin" / "python", timeout=1200)
    return dict(zip(runs, done, strict=True))


@pytest.mark.parametrize("name", CASES)
def test_cached_decode_gives_the_uncached_tokens(reports: dict[str, dict], name: str) -> None:
    profile = load_profile(name, environ={})
    report = reports[name]
    assert report["tokens_equal"], report
    assert report["distinct_tokens"] > 1, report  # a constant output would prove nothing
    assert report["tokens"] == (int(profile.train.args["max_target_length"])
                                - int(profile.train.args["max_prefill_predict_length"]))


def test_the_rehearsal_case_is_the_profile_on_two_float32_layers() -> None:
    """The case the cache is checked on is the rehearsal profile's own model and train
    arguments, in float32 (in bfloat16 a near-tie may flip), on two decoder layers."""
    _, dense = rollout.quick_configurations()
    profile = load_profile("rehearsal", environ={})
    assert f"model_name={profile.model.maxtext_name}" in dense
    assert {"dtype=float32", "weight_dtype=float32", "base_num_decoder_layers=2",
            f"sparse_matmul={profile.train.args['sparse_matmul']}"} <= set(dense)


def test_decode_check_refuses_an_empty_configuration(rehearsal_image) -> None:
    """A ``+`` with nothing after it would check MaxText's defaults, not a profile's model:
    refused before any model is built."""
    done = subprocess.run([str(rehearsal_image.venv_dir() / "bin" / "python"),
                           str(REHEARSAL_DIR / "decode_check.py"),
                           *rollout.decode_args("rehearsal", 1), "+"],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode != 0
    assert "an empty configuration" in done.stderr


def test_the_rollout_benchmark_decodes_both_ways(reports: dict[str, dict]) -> None:
    """benchmarks/rollout.py's quick run (two float32 layers, no timed repeat), its
    configurations in the module's decode_check process: both MoE paths, each cached and
    uncached, decode tokens (the benchmark exits 1 otherwise), and its table is printed."""
    lines, decoded = rollout.table(reports[SPARSE], reports["rehearsal"])
    assert decoded, lines
    assert_figures("\n".join(lines), "previous main: no cache, sparse MoE",
                   "this branch: KV cache, dense MoE", "greedy tokens cached = uncached")

