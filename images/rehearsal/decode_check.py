"""Compare the stand-in rollout's cached decode with its uncached one on the same weights.

Why: the stand-in (train_rl_cpu.py) samples through MaxText's autoregressive mode and its
KV cache; the uncached path (the whole sequence recomputed for every token)
is the reference it must agree with. Greedy decoding on identical weights must give the
same tokens; the wall times of both give the rollout's tokens/s before and after.

Runs in the rehearsal venv on random weights (no checkpoint needed), with the rehearsal
profile's model arguments passed as MaxText key=value overrides, e.g.
``model_name=qwen3-30b-a3b override_model_config=true base_emb_dim=64 ...``.
A lone ``+`` among the overrides starts another configuration, checked after the one before
in the same process: MaxText's and JAX's imports (most of a short check's CPU) are paid once.
Prints ONE JSON line per configuration, in order: ``{"tokens_equal", "equal_prefix", "tokens",
"distinct_tokens", "cached_tok_s", "uncached_tok_s", "cached_s", "uncached_s",
"cached_first_s", "uncached_first_s"}`` (first = incl. compile; equal_prefix = leading tokens
that agree).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import train_rl_cpu  # the stand-in under test, before MaxText's train_rl

PAD, EOS = 151643, 151645


def configurations(maxtext_args: list[str]) -> list[list[str]]:
    """The override lists between lone ``+`` separators; an empty one is refused (it would
    check MaxText's defaults, not a profile's model)."""
    runs: list[list[str]] = [[]]
    for arg in maxtext_args:
        if arg == "+":
            runs.append([])
        else:
            runs[-1].append(arg)
    if any(not run for run in runs):
        raise SystemExit("decode_check: an empty configuration (a '+' at either end or two "
                         "in a row); give each configuration its key=value overrides")
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2, help="timed calls after the first")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("maxtext_args", nargs=argparse.REMAINDER,
                        help="key=value overrides; a lone + starts another configuration")
    args = parser.parse_args()
    runs = configurations(args.maxtext_args)
    train_rl_cpu.leave_tensorflow_out()  # as the training it checks
    train_rl_cpu.install_stand_ins()
    for run in runs:
        print(json.dumps(check(run, args.repeats, args.seed)), flush=True)


def check(maxtext_args: list[str], repeats: int, seed: int) -> dict[str, object]:
    """One configuration's cached and uncached decodes, timed interleaved; its report."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from flax import nnx
    from maxtext.configs import types as config_types
    from maxtext.trainers.post_train.rl import train_rl
    from maxtext.utils import model_creation_utils

    config, _, devices, _ = model_creation_utils.setup_configs_and_devices(
        [train_rl.__file__, *maxtext_args], {}, config_class=config_types.RLConfig)
    from jax.sharding import Mesh
    from maxtext.integration.tunix.tunix_adapter import TunixMaxTextAdapter
    from maxtext.utils import maxtext_utils, maxtext_utils_nnx

    mesh = Mesh(maxtext_utils.create_device_mesh(config, devices), config.mesh_axes)
    create, abstract = model_creation_utils.create_nnx_abstract_model(config, mesh, devices)
    base = maxtext_utils_nnx.create_nnx_sharded_model(abstract, create, mesh=mesh)
    actor = TunixMaxTextAdapter(base_model=base, pad_id=PAD)
    tokenizer = types.SimpleNamespace(pad_token_id=PAD, eos_token_id=EOS)
    rollout_cls = train_rl_cpu._build_rollout_class()
    rollout = rollout_cls(rollout_actor=actor, tokenizer=tokenizer, mesh=mesh, maxtext_config=config)
    prompt_len = int(config.max_prefill_predict_length)
    gen_len = int(config.max_target_length) - prompt_len
    rng = np.random.default_rng(seed)
    prompt = np.full((1, prompt_len), PAD, dtype=np.int32)
    true_len = prompt_len - prompt_len // 8  # left padding, as the rollout builds it
    prompt[0, prompt_len - true_len:] = rng.integers(0, PAD, true_len)
    buf = np.concatenate([prompt, np.full((1, gen_len), PAD, dtype=np.int32)], axis=1)

    def cached() -> np.ndarray:
        return rollout._decode_rows(prompt, 0, 0.0, seed)

    def uncached() -> np.ndarray:
        _, state = nnx.split(rollout.model())
        fn = rollout._sampler(prompt_len, gen_len, 0, 0.0, 1)
        return np.asarray(jax.device_get(fn(state, jnp.asarray(buf), jax.random.PRNGKey(seed))))

    walls: dict[str, list[float]] = {"cached": [], "uncached": []}
    outs: dict[str, np.ndarray] = {}
    with jax.set_mesh(mesh):
        for _ in range(1 + repeats):  # interleaved, so both see the same machine load
            for name, fn in (("cached", cached), ("uncached", uncached)):
                started = time.monotonic()
                outs[name] = fn()
                walls[name].append(time.monotonic() - started)
    steady = {name: min(w[1:]) if len(w) > 1 else w[0] for name, w in walls.items()}
    return {
        "tokens_equal": bool((outs["cached"] == outs["uncached"]).all()),
        "equal_prefix": int(np.argmin(np.append(outs["cached"][0] == outs["uncached"][0], False))),
        "tokens": int(gen_len), "distinct_tokens": len(set(outs["uncached"].ravel().tolist())),
        "cached_tok_s": gen_len / steady["cached"], "uncached_tok_s": gen_len / steady["uncached"],
        "cached_s": steady["cached"], "uncached_s": steady["uncached"],
        "cached_first_s": walls["cached"][0], "uncached_first_s": walls["uncached"][0],
    }


if __name__ == "__main__":
    main()
