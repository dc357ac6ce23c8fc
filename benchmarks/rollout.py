"""Benchmark: the stand-in rollout's tokens/s, previous main's way against this branch's.

Previous main sampled without a KV cache (the whole sequence recomputed for every token)
through MaxText's sparse MoE (sparse_matmul=true); this branch decodes with MaxText's KV
cache through the dense MoE (the rehearsal profile's sparse_matmul=false). Runs
images/rehearsal/decode_check.py in the rehearsal venv, on random weights of the profile's
model (all 48 layers unless --layers): once with sparse_matmul=true, then once with the
profile as it is, in one process; each configuration times the cached and the uncached
decode interleaved, so both see the same load. Prints tokens/s of each of the four and the
ratios to previous main's.
Exits 1 when a run decoded no token. ``--quick`` is ``--layers 2 --repeats 0 --float32``:
the smallest run, in the configuration whose tokens tests/backends/local/
test_standin_rollout.py compares. That test runs the quick run's two configurations in its
own decode_check process beside its other cases (MaxText's imports paid once) and prints
the quick run's table from their reports (``quick_configurations``, ``table``).
Usage: .venv/bin/python benchmarks/rollout.py [--layers N] [--repeats N] [--float32] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from flows.config import load_profile  # noqa: E402
from flows.core.workload import render_args  # noqa: E402

# The train arguments that shape the model and the cache; the data and reward keys do not.
DECODE_KEYS = ("scan_layers", "hardware", "skip_jax_distributed_system", "use_pathways",
               "megablox", "sparse_matmul", "max_prefill_predict_length", "max_target_length",
               "batch_size", "rl.num_generations")
# float32: in bfloat16 the two summation orders may flip a near-tie late in a long decode
# (measured at 48 layers: 13 of 16 tokens equal; 16 in float32)
FLOAT32 = ("dtype=float32", "weight_dtype=float32")
QUICK_LAYERS = 2
SPARSE = ("sparse_matmul=true",)  # previous main's MoE path, over the profile's


def decode_args(profile_name: str, layers: int | None, *extra: str) -> list[str]:
    """A profile's model and train arguments for decode_check.py (those that shape the model
    and the cache), then EXTRA, on LAYERS decoder layers (None: the profile's)."""
    profile = load_profile(profile_name, environ={})
    train = {k: v for k, v in profile.train.args.items() if k in DECODE_KEYS}
    return [f"model_name={profile.model.maxtext_name}", *render_args(profile.model.args),
            *render_args(train), *extra,
            *([f"base_num_decoder_layers={layers}"] if layers else [])]


def configurations(layers: int | None, float32: bool) -> tuple[list[str], list[str]]:
    """The rehearsal profile's two configurations: previous main's (sparse MoE) and this
    branch's (the profile as it is)."""
    dtype = FLOAT32 if float32 else ()
    return (decode_args("rehearsal", layers, *SPARSE, *dtype),
            decode_args("rehearsal", layers, *dtype))


def quick_configurations() -> tuple[list[str], list[str]]:
    """``--quick``'s two configurations (run with no timed repeat)."""
    return configurations(QUICK_LAYERS, float32=True)


def rehearsal_python() -> Path:
    profile = load_profile("rehearsal", environ={})
    return ROOT / (profile.local.venv if profile.local else ".venvs/rehearsal") / "bin" / "python"


def measure(runs: list[list[str]], repeats: int, python: Path | None = None,
            timeout: float | None = None) -> list[dict]:
    """decode_check.py's report of each configuration, all from one process: MaxText's and
    JAX's imports, most of a short check's CPU, are paid once. Raises RuntimeError with the
    end of its stderr when it fails."""
    argv = [str(python or rehearsal_python()), str(ROOT / "images/rehearsal/decode_check.py"),
            "--repeats", str(repeats)]
    for i, run in enumerate(runs):
        argv += [*(["+"] if i else []), *run]
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout,
                          check=False)
    if done.returncode != 0:
        raise RuntimeError(f"decode_check failed:\n{done.stderr[-3000:]}")
    return [json.loads(line) for line in done.stdout.strip().splitlines()[-len(runs):]]


def table(sparse: dict, dense: dict) -> tuple[list[str], bool]:
    """The printed lines of the two configurations' reports, and whether every one of the
    four decodes produced tokens."""
    main_tok_s = sparse["uncached_tok_s"]
    rows = [("previous main: no cache, sparse MoE", sparse, "uncached"),
            ("KV cache, sparse MoE", sparse, "cached"),
            ("no cache, dense MoE", dense, "uncached"),
            ("this branch: KV cache, dense MoE", dense, "cached")]
    lines = [f"{'rollout path':<38} {'tokens/s':>9} {'first call s':>13} {'× main':>7}"]
    for label, report, kind in rows:
        tok_s = report[f"{kind}_tok_s"]
        lines.append(f"{label:<38} {tok_s:9.2f} {report[f'{kind}_first_s']:13.1f} "
                     f"{tok_s / main_tok_s:7.2f}")
    lines.append(f"greedy tokens cached = uncached (leading of {dense['tokens']}; bfloat16 may "
                 f"flip a late near-tie): sparse {sparse['equal_prefix']}, dense "
                 f"{dense['equal_prefix']}")
    decoded = all(r["tokens"] > 0 and r[f"{kind}_tok_s"] > 0 for r in (sparse, dense)
                  for kind in ("cached", "uncached"))
    if not decoded:
        lines.append("a decode produced no token")
    return lines, decoded


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, help="decoder layers (default: the profile's 48)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--float32", action="store_true",
                        help="float32 weights and activations (the profile's dtype otherwise)")
    parser.add_argument("--quick", action="store_true",
                        help=f"{QUICK_LAYERS} layers in float32, no timed repeat (the tests' run)")
    args = parser.parse_args()
    if args.quick:
        args.layers, args.repeats, args.float32 = QUICK_LAYERS, 0, True
    try:
        sparse, dense = measure(list(configurations(args.layers, args.float32)), args.repeats)
    except RuntimeError as exc:
        sys.exit(str(exc))
    lines, decoded = table(sparse, dense)
    print("\n".join(lines))
    return 0 if decoded else 1


if __name__ == "__main__":
    raise SystemExit(main())
