"""CPU rehearsal launcher for MaxText's real ``train_rl`` (GRPO).

PLAINLY: the vLLM rollout is replaced by a CPU stand-in; everything else is the real
MaxText / Tunix code (config parsing, mesh, restoring ``0/items`` into actor and
reference, dataset pipeline, reward loading, Tunix GRPO learner, optimizer, Orbax
checkpoints, TensorBoard metrics).

Why a stand-in is needed: ``maxtext.trainers.post_train.rl.train_rl`` imports
``maxtext.integration.vllm.maxtext_vllm_adapter`` (which imports ``tpu_inference``,
TPU-only) and hard-wires ``rollout_engine=partial(MaxTextVllmRollout, ...)`` from
``maxtext.integration.vllm.maxtext_vllm_rollout`` (which imports vLLM).  No config key
selects another engine, and Tunix's own "vanilla" rollout cannot drive the MaxText
model (it needs a ``.config`` and a KV cache the MaxText adapter does not provide).

What this launcher does, before importing ``train_rl``:

1. imports ``multiprocessing.pool``: ``utils_rl`` (via ``math_verify_pool``) uses
   ``multiprocessing.pool`` as an attribute without importing the submodule, which
   raises ``AttributeError: module 'multiprocessing' has no attribute 'pool'`` unless
   something imported it first;
2. puts two stand-in modules into ``sys.modules``:
   ``maxtext.integration.vllm.maxtext_vllm_adapter`` whose ``register()`` does nothing,
   and ``maxtext.integration.vllm.maxtext_vllm_rollout`` whose ``MaxTextVllmRollout``
   is :class:`CpuActorRollout`, a Tunix ``BaseRollout`` that samples from the actor
   model itself through MaxText's own decode path: a second instance of the same
   Transformer built in ``autoregressive`` mode (which gives every attention layer its
   ``KVCache``), holding the actor's current parameters, prefills the prompt once and
   then decodes one token per step from the cache.  Shapes are fixed (one row at a
   time, the cache's batch of ``micro_batch_size_to_train_on``), so XLA compiles the
   prefill+decode loop once per run.  Where the cache cannot hold the request (a prompt
   or generation length other than the config's) it falls back to recomputing the whole
   fixed-size sequence for every token (no cache);
3. wraps ``utils_rl.get_optimizer`` (see :func:`float32_hyperparams`) so that the
   optimizer state starts with the learning rate in the dtype Tunix's update leaves in it,
   and Tunix's train step compiles once instead of twice;
4. imports with the cycle collector off, then freezes what the imports left (see
   :func:`freeze_imports`): Tunix's full ``gc.collect()`` calls and the automatic ones no
   longer walk every imported module's objects;
5. leaves TensorFlow unimported (see :func:`leave_tensorflow_out`): nothing the rehearsal
   runs uses it, and its import cost every program CPU;
6. runs ``train_rl.main`` through ``absl.app.run`` with the argv it was given, exactly
   as ``python -m maxtext.trainers.post_train.rl.train_rl <argv>`` would.

Sampling honours ``temperature`` and ``top_k`` of the rollout config; ``top_p`` is
ignored (the stand-in's output quality is irrelevant: a tiny random model is sampled).
"""

from __future__ import annotations

import argparse
import gc
import logging
import multiprocessing.pool  # noqa: F401  # see point 1 of the module docstring
import sys
import types
from collections.abc import Callable
from typing import Any

STAND_IN_NOTICE = (
    "CPU REHEARSAL: the vLLM rollout is replaced by a CPU stand-in that samples from the "
    "actor model itself; everything else is the real MaxText/Tunix train_rl code."
)

log = logging.getLogger("train_rl_cpu")


def _build_rollout_class() -> type:
    """Create the stand-in rollout class (imports JAX/Tunix lazily, after the notice)."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from flax import nnx
    from tunix.rl import common as rl_common
    from tunix.rl.rollout import base_rollout

    class CpuActorRollout(base_rollout.BaseRollout):
        """Stand-in for MaxTextVllmRollout: samples with the actor model, no vLLM.

        Accepts the keyword arguments RLCluster passes to a custom rollout engine
        (``rollout_actor``, ``tokenizer``, ``mesh``, ``rollout_config``) plus the
        ``maxtext_config`` that train_rl binds with ``functools.partial``.
        """

        def __init__(
            self,
            rollout_actor: Any = None,
            tokenizer: Any = None,
            mesh: Any = None,
            rollout_config: Any = None,
            maxtext_config: Any = None,
            **kwargs: Any,
        ) -> None:
            del kwargs  # vLLM-only settings have no meaning here
            self._maxtext_config = maxtext_config
            self._decoder: tuple[Any, ...] | None = None
            self._model = rollout_actor
            self._tokenizer = tokenizer
            self.mesh = mesh
            self._config = rollout_config
            self._calls = 0
            self._compiled: dict[tuple[int, int, int, float, int], Callable[..., Any]] = {}
            pad = tokenizer.pad_token_id
            self._pad = int(pad if pad is not None else tokenizer.eos_token_id)
            self._eos = int(tokenizer.eos_token_id)
            # Built here, outside generate()'s rollout mesh context: eval_shape of the
            # autoregressive model fails inside it (its cache axes are logical names).
            self._twin = self._autoregressive_twin() if maxtext_config is not None else None
            log.warning("CpuActorRollout stand-in created (no vLLM; MaxText decode with its KV cache).")

        def model(self) -> Any:
            """The module whose weights are sampled: the actor model itself."""
            return self._model

        def pad_id(self) -> int:
            """Tokenizer pad id (Qwen3: <|endoftext|>)."""
            return self._pad

        def eos_id(self) -> int:
            """Tokenizer eos id (Qwen3 instruct: <|im_end|>)."""
            return self._eos

        def update_params(self, params: Any, filter_types: tuple[Any, ...] | None = None) -> None:
            """Copy trainer weights in; a no-op in effect when rollout and actor share the module."""
            del filter_types
            nnx.update(self._model, params)

        def get_per_token_logps(self, prompt_tokens: Any, completion_tokens: Any) -> Any:
            """Per-token log-probs of ``completion_tokens`` under the current weights."""
            graphdef, state = nnx.split(self._model)
            return rl_common.compute_per_token_logps(
                graphdef, state, prompt_tokens, completion_tokens, pad_id=self._pad, eos_id=self._eos
            )

        def _sampler(
            self, prompt_len: int, gen_len: int, top_k: int, temperature: float, batch: int
        ) -> Callable[..., Any]:
            """Build (once per shape) a jitted loop that fills ``gen_len`` tokens."""
            key = (prompt_len, gen_len, top_k, temperature, batch)
            if key in self._compiled:
                return self._compiled[key]
            graphdef, _ = nnx.split(self._model)
            pad = self._pad
            total = prompt_len + gen_len

            def run(state: Any, tokens: Any, rng: Any) -> Any:
                # the state travels through the loop (see _decode_fn: Gemma 3 writes it back)
                def body(i: Any, carry: Any) -> Any:
                    toks, key_, state = carry
                    mask = (toks != pad).astype(jnp.int32)
                    positions = jnp.clip(jnp.cumsum(mask, axis=-1) - 1, 0, None)
                    model = nnx.merge(graphdef, state)
                    logits, _ = model(toks, positions=positions, cache=None, attention_mask=None)
                    state = nnx.split(model)[1]
                    pos = prompt_len + i - 1
                    step_logits = jax.lax.dynamic_index_in_dim(logits, pos, axis=1, keepdims=False)
                    step_logits = step_logits.astype(jnp.float32)
                    if top_k > 0:
                        kth = jax.lax.top_k(step_logits, top_k)[0][:, -1:]
                        step_logits = jnp.where(step_logits < kth, -jnp.inf, step_logits)
                    key_, sub = jax.random.split(key_)
                    if temperature > 0:
                        nxt = jax.random.categorical(sub, step_logits / temperature, axis=-1)
                    else:
                        nxt = jnp.argmax(step_logits, axis=-1)
                    nxt = nxt.astype(toks.dtype)
                    toks = jax.lax.dynamic_update_index_in_dim(toks, nxt, prompt_len + i, axis=1)
                    return toks, key_, state

                out, _, _ = jax.lax.fori_loop(0, gen_len, body, (tokens, rng, state))
                return out[:, prompt_len:total]

            fn = jax.jit(run)
            self._compiled[key] = fn
            return fn

        def _fits_cache(self, prompt_len: int, gen_len: int) -> bool:
            """MaxText's KVCache is sized by the config: prefill and target lengths, batch 1."""
            cfg = self._maxtext_config
            return (self._twin is not None and int(cfg.micro_batch_size_to_train_on) == 1
                    and prompt_len == int(cfg.max_prefill_predict_length)
                    and prompt_len + gen_len == int(cfg.max_target_length))

        def _autoregressive_twin(self) -> tuple[Any, Any, Any]:
            """The actor's Transformer built in autoregressive mode, abstractly (no weights
            are initialised): its graph, empty KV caches, and its unused RNG streams
            (decoding is deterministic apart from our own sampling key). The parameters
            are the actor's at every call."""
            from maxtext.common.common_types import MODEL_MODE_AUTOREGRESSIVE
            from maxtext.utils import model_creation_utils

            _, abstract = model_creation_utils.create_nnx_abstract_model(
                self._maxtext_config, self.mesh, model_mode=MODEL_MODE_AUTOREGRESSIVE)
            graphdef, _, abs_cache, abs_rest = nnx.split(abstract, nnx.Param, nnx.Cache, ...)
            cache0, rest = (jax.tree.map(lambda a: jnp.zeros(a.shape, a.dtype), t)
                            for t in (abs_cache, abs_rest))
            return graphdef, cache0, rest

        def _decode_fn(self, top_k: int, temperature: float) -> tuple[Any, ...]:
            """One jitted prefill + decode loop over the twin's KV cache, built once."""
            if self._decoder is not None and self._decoder[0] == (top_k, temperature):
                return self._decoder
            from maxtext.common.common_types import MODEL_MODE_AUTOREGRESSIVE, MODEL_MODE_PREFILL

            cfg, pad = self._maxtext_config, self._pad
            gen_len = int(cfg.max_target_length) - int(cfg.max_prefill_predict_length)
            assert self._twin is not None
            graphdef = self._twin[0]

            def pick(logits: Any, key_: Any) -> Any:
                logits = logits.astype(jnp.float32)
                if top_k > 0:
                    kth = jax.lax.top_k(logits, top_k)[0][:, -1:]
                    logits = jnp.where(logits < kth, -jnp.inf, logits)
                if temperature > 0:
                    return jax.random.categorical(key_, logits / temperature, axis=-1).astype(jnp.int32)
                return jnp.argmax(logits, axis=-1).astype(jnp.int32)

            # The caches and RNG streams go in as arguments: closed over, their Variables
            # would belong to the outer trace and MaxText's layer scan could not update them.
            def run(params: Any, cache0: Any, rest: Any, prompt: Any, rng: Any) -> Any:
                seg = (prompt != pad).astype(jnp.int32)
                positions = jnp.clip(jnp.cumsum(seg, axis=-1) - 1, 0, None)
                model = nnx.merge(graphdef, params, cache0, rest)
                logits = model(prompt, positions, decoder_segment_ids=seg, model_mode=MODEL_MODE_PREFILL)
                keys = jax.random.split(rng, gen_len)
                tok = pick(logits[:, -1], keys[0])  # left-padded: the last column is the last token
                out = jnp.zeros((prompt.shape[0], gen_len), jnp.int32).at[:, 0].set(tok)
                true_len = seg.sum(axis=-1)

                # The whole state travels through the loop, not the caches alone: Gemma 3's
                # scanned blocks write their parameters and RNG counts back after each call,
                # which cannot go into a Variable of the outer trace.
                def body(i: Any, carry: Any) -> Any:
                    state, tok, out = carry
                    step = nnx.merge(graphdef, *state)
                    logits = step(tok[:, None], (true_len + i - 1)[:, None],
                                  model_mode=MODEL_MODE_AUTOREGRESSIVE)
                    tok = pick(logits[:, -1], keys[i])
                    state = nnx.split(step, nnx.Param, nnx.Cache, ...)[1:]
                    return state, tok, out.at[:, i].set(tok)

                state = nnx.split(model, nnx.Param, nnx.Cache, ...)[1:]
                _, _, out = jax.lax.fori_loop(1, gen_len, body, (state, tok, out))
                return out

            self._decoder = ((top_k, temperature), jax.jit(run))
            return self._decoder

        def _decode_rows(self, prompt_arr: Any, top_k: int, temperature: float, seed: int) -> Any:
            """One row at a time through the cached decode (same shapes: compiled once)."""
            _, fn = self._decode_fn(top_k, temperature)
            params = nnx.state(self._model.base, nnx.Param)
            keys = jax.random.split(jax.random.PRNGKey(seed), prompt_arr.shape[0])
            assert self._twin is not None
            _, cache0, rest = self._twin
            rows = [fn(params, cache0, rest, jnp.asarray(prompt_arr[r : r + 1]), keys[r])
                    for r in range(prompt_arr.shape[0])]
            return np.concatenate([np.asarray(jax.device_get(row)) for row in rows], axis=0)

        def generate(self, prompts: list[str], rollout_config: Any, **kwargs: Any) -> Any:
            """Sample completions for ``prompts`` with fixed shapes (left-padded prompts)."""
            del kwargs
            prompt_len = int(rollout_config.max_prompt_length)
            gen_len = int(rollout_config.max_tokens_to_generate)
            top_k = int(rollout_config.top_k or 0)
            temperature = float(rollout_config.temperature or 0.0)
            ids = [self._tokenizer.encode(p)[-prompt_len:] for p in prompts]
            batch = len(ids)
            prompt_arr = np.full((batch, prompt_len), self._pad, dtype=np.int32)
            for row, seq in enumerate(ids):
                prompt_arr[row, prompt_len - len(seq) :] = seq
            buf = np.concatenate([prompt_arr, np.full((batch, gen_len), self._pad, dtype=np.int32)], axis=1)
            _, state = nnx.split(self._model)
            base_seed = 0 if rollout_config.seed is None else int(np.asarray(rollout_config.seed).ravel()[0])
            seed = base_seed + self._calls
            self._calls += 1
            if self._fits_cache(prompt_len, gen_len):
                completion = self._decode_rows(prompt_arr, top_k, temperature, seed)
            else:
                fn = self._sampler(prompt_len, gen_len, top_k, temperature, batch)
                completion = np.asarray(jax.device_get(fn(state, jnp.asarray(buf), jax.random.PRNGKey(seed))))
            tokens: list[np.ndarray] = []
            for row in completion:
                stops = np.nonzero((row == self._eos) | (row == self._pad))[0]
                end = int(stops[0]) + 1 if stops.size else gen_len
                tokens.append(row[:end].astype(np.int32))
            texts = [self._tokenizer.decode(t.tolist(), skip_special_tokens=True) for t in tokens]
            return base_rollout.RolloutOutput(
                text=texts,
                logits=None,
                tokens=tokens,
                left_padded_prompt_tokens=prompt_arr,
                logprobs=None,
            )

    return CpuActorRollout


def float32_hyperparams(get_optimizer: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``get_optimizer`` whose state starts with its float hyperparameters in float32.

    Why: MaxText wraps its optimizer in ``optax.inject_hyperparams`` (utils_rl.get_optimizer),
    whose ``init`` stores the scheduled learning rate in the dtype of the first parameter
    (bfloat16 here) and whose ``update`` stores it in the dtype of the first update: float32,
    because Tunix divides the gradients by a float32 denominator (or accumulates them in
    float32) before ``optimizer.update``. The state's ``hyperparams['learning_rate']`` thus
    changes dtype after step 1, and Tunix's jitted ``_train_step`` misses its compile cache
    at step 2: a second compilation of the whole train step (about 10 CPU-s for the tiny
    Qwen3 with a cold cache).
    Starting it in float32 makes both steps one program. The numbers stay the same: the
    update recomputes a scheduled learning rate from the step count and never reads the
    stored one, which only Tunix's metric log reads, after the update (measured: the same
    metrics, and bit-identical parameters and optimizer state after two steps; decision
    0044). The GKE image keeps MaxText's optimizer as it is.
    """
    import jax.numpy as jnp
    import optax

    def as_float32(value: Any) -> Any:
        value = jnp.asarray(value)
        return value.astype(jnp.float32) if jnp.issubdtype(value.dtype, jnp.floating) else value

    def wrapped(config: Any) -> Any:
        inner = get_optimizer(config)

        def init(params: Any) -> Any:
            state = inner.init(params)
            if not isinstance(state, optax.InjectStatefulHyperparamsState):
                return state  # not the optimizer this was written for: left as it is
            return state._replace(hyperparams={k: as_float32(v) for k, v in state.hyperparams.items()})

        return optax.GradientTransformationExtraArgs(init, inner.update)

    return wrapped


def freeze_imports() -> None:
    """Move every object alive now (the imported modules) out of the cycle collector's reach.

    Why: the imports (TensorFlow, JAX, transformers, MaxText, Tunix) leave most of the
    process's long-lived objects, and every full collection walks them all: Tunix calls
    ``gc.collect()`` after its log-prob passes and at each weight sync, and tracing the
    model triggers the automatic ones. Frozen, they are still freed by reference counting; only the cycle
    collector skips them. The collector runs again for everything created after this, the
    models' arrays included, so what Tunix's collections free is unchanged; nothing numeric
    depends on when a collection runs. Measured on the rehearsal profile's training (two
    GRPO steps, warm compilation cache): 3.6 CPU-s in the collector before, 0.6 after, with
    the same metrics and bit-identical checkpointed parameters and optimizer state.
    """
    gc.freeze()
    gc.enable()


def leave_tensorflow_out() -> None:
    """Make ``import tensorflow`` fail in this process, as where it is not installed.

    Why: MaxText imports TensorFlow at the top of ``input_pipeline/multihost_dataloading.py``
    (reached through ``common/checkpointing.py``) for one retryable error type of its
    ``tf.data`` loaders, inside ``try: ... except ImportError``, its own path for an
    environment without TensorFlow. Nothing the rehearsal runs uses it: training reads its
    dataset through Hugging Face ``datasets`` and Grain, Orbax writes the checkpoints,
    tensorboardX the metrics, transformers and safetensors the export. The import (Keras and
    matplotlib with it), bytecode cached, cost 1-3 CPU-s a program: a check of two decoder
    layers took 19.9 CPU-s with it and 16.8 without, the same tokens (decision 0047; about 7
    more where the bytecode is compiled from source). ``None`` in ``sys.modules`` is
    the import system's way to refuse a module (``ImportError``); a process that imported
    TensorFlow already keeps it. The post-training image on GKE is unchanged.
    """
    sys.modules.setdefault("tensorflow", None)


def install_stand_ins() -> None:
    """Register the two stand-in modules before anything imports the real ones."""
    import maxtext.integration.vllm as vllm_pkg

    adapter = types.ModuleType("maxtext.integration.vllm.maxtext_vllm_adapter")
    adapter.__doc__ = "CPU rehearsal stand-in: no tpu_inference; register() does nothing."
    adapter.register = lambda: None  # type: ignore[attr-defined]
    rollout = types.ModuleType("maxtext.integration.vllm.maxtext_vllm_rollout")
    rollout.__doc__ = "CPU rehearsal stand-in: MaxTextVllmRollout samples from the actor model."
    rollout.MaxTextVllmRollout = _build_rollout_class()  # type: ignore[attr-defined]
    for mod in (adapter, rollout):
        sys.modules[mod.__name__] = mod
        setattr(vllm_pkg, mod.__name__.rsplit(".", 1)[1], mod)


def main() -> None:
    """Print the notice, install the stand-ins, then run the real train_rl main (with its
    optimizer's learning rate starting in float32: :func:`float32_hyperparams`, and the
    imports frozen out of the collector: :func:`freeze_imports`, and TensorFlow left out:
    :func:`leave_tensorflow_out`)."""
    print(STAND_IN_NOTICE, file=sys.stderr, flush=True)
    parser = argparse.ArgumentParser(
        description="Run MaxText train_rl on CPU with a stand-in for the vLLM rollout.",
        epilog="All arguments are passed unchanged to train_rl, e.g. model_name=qwen3-30b-a3b "
        "... (a leading .yml file is optional: as with `python -m ...train_rl`, MaxText then "
        "takes post_train/rl.yml).",
    )
    parser.add_argument("train_rl_argv", nargs=argparse.REMAINDER,
                        help="[config file] key=value overrides")
    args = parser.parse_args()
    if not args.train_rl_argv:
        parser.error("missing train_rl arguments (config file and key=value overrides)")
    logging.basicConfig(level=logging.INFO)
    gc.disable()  # the imports below make no garbage worth a collection: see freeze_imports
    leave_tensorflow_out()
    install_stand_ins()
    from absl import app
    from maxtext.trainers.post_train.rl import train_rl, utils_rl

    freeze_imports()
    utils_rl.get_optimizer = float32_hyperparams(utils_rl.get_optimizer)

    # argv[0] is train_rl's own file, as under `python -m`: MaxText infers its default config
    # (post_train/rl.yml) from it when no .yml is given.
    app.run(train_rl.main, argv=[train_rl.__file__, *args.train_rl_argv])


if __name__ == "__main__":
    main()
