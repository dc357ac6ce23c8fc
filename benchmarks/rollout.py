"""Benchmark: the stand-in rollout's tokens/s, previous main's way against this branch's.

Previous main sampled without a KV cache (the whole sequence recomputed for every token)
through MaxText's sparse MoE (sparse_matmul=true); this branch decodes with MaxText's KV
cache through the dense MoE (the rehearsal profile's sparse_matmul=false). Runs
images/rehearsal/decode_check.py in the rehearsal venv, on random weights of the profile's
model (all 48 layers unless --layers): once with sparse_matmul=true, then once with the
profile as it is, in one process; each configuration times the cached and the uncached
decode interleaved, so both see the same load. Prints tokens/s of each of the four and the
ratios to previous main's.
Exits 1 when a run decoded no token. ``--quick`` (the tests' run, beside the stand-in
rollout's test, which has the venv) is ``--layers 1 --repeats 1``.
Usage: .venv/bin/python benchmarks/rollout.py [--layers N] [--repeats N] [--quick]
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

DECODE_KEYS = ("scan_layers", "hardware", "skip_jax_distributed_system", "use_pathways",
               "megablox", "sparse_matmul", "max_prefill_predict_length", "max_target_length",
               "batch_size", "rl.num_generations")


def measure(variants: list[list[str]], layers: int | None,
            repeats: int) -> list[dict[str, float]]:
    """decode_check.py's report of each variant (overrides on top of the profile's), all from
    one process: MaxText's imports are paid once."""
    profile = load_profile("rehearsal", environ={})
    train = {k: v for k, v in profile.train.args.items() if k in DECODE_KEYS}
    python = ROOT / (profile.local.venv if profile.local else ".venvs/rehearsal") / "bin" / "python"
    argv = [str(python), str(ROOT / "images/rehearsal/decode_check.py"), "--repeats", str(repeats)]
    for i, extra in enumerate(variants):
        argv += [*(["+"] if i else []), f"model_name={profile.model.maxtext_name}",
                 *render_args(profile.model.args), *render_args(train), *extra,
                 *([f"base_num_decoder_layers={layers}"] if layers else [])]
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        sys.exit(f"decode_check failed:\n{done.stderr[-3000:]}")
    return [json.loads(line) for line in done.stdout.strip().splitlines()[-len(variants):]]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, help="decoder layers (default: the profile's 48)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="one layer, one repeat (the tests' run)")
    args = parser.parse_args()
    if args.quick:
        args.layers, args.repeats = 1, 1
    sparse, dense = measure([["sparse_matmul=true"], []], args.layers, args.repeats)
    main_tok_s = sparse["uncached_tok_s"]
    rows = [("previous main: no cache, sparse MoE", sparse, "uncached"),
            ("KV cache, sparse MoE", sparse, "cached"),
            ("no cache, dense MoE", dense, "uncached"),
            ("this branch: KV cache, dense MoE", dense, "cached")]
    print(f"{'rollout path':<38} {'tokens/s':>9} {'first call s':>13} {'× main':>7}")
    for label, report, kind in rows:
        tok_s = report[f"{kind}_tok_s"]
        print(f"{label:<38} {tok_s:9.2f} {report[f'{kind}_first_s']:13.1f} {tok_s / main_tok_s:7.2f}")
    print(f"greedy tokens cached = uncached (leading of {dense['tokens']}; bfloat16 may flip a "
          f"late near-tie): sparse {sparse['equal_prefix']}, dense {dense['equal_prefix']}")
    decoded = all(r["tokens"] > 0 and r[f"{kind}_tok_s"] > 0 for r in (sparse, dense)
                  for kind in ("cached", "uncached"))
    if not decoded:
        print("a decode produced no token")
    return 0 if decoded else 1


if __name__ == "__main__":
    raise SystemExit(main())
