"""Score one checkpoint on a held-out set with MaxText 0.2.4's own RL evaluation.

Why a program of ours: MaxText 0.2.4 evaluates only inside ``train_rl`` (``_rl_train_impl``
calls ``evaluate_rl.evaluate`` before and after training when ``num_test_batches > 0``) and
only logs the numbers. This program builds exactly what ``_rl_train_impl`` builds up to its
pre-RL evaluation (configs and devices, tokenizer, actor/reference/rollout models,
``prepare_datasets``, ``create_rl_components``), from the *training's own arguments*, for
the checkpoint named by ``load_parameters_path``, calls MaxText's ``evaluate`` once with the
training's ``reward_fns``, and writes the scores as JSON. So answer accuracy
(``utils_rl.check_correctness``), format accuracy (``get_match_format_regex``) and the mean
reward are MaxText's definitions, not a re-implementation.

Two things it adds:

- every response's summed reward, recorded by wrapping the reward functions it hands to
  ``evaluate``, so the pipeline can put a confidence interval on the mean reward; the first
  few responses are kept with their question and reward (``responses``, bounded in count
  and length: the watch shows them as the champion's sample outputs);
- the held-out check: the rows the training run consumed (``prepare_datasets``'s training
  dataset, iterated as the trainer iterates it) against the evaluation rows, by question
  text. Any overlap exits with code 3 and ``EVAL-OVERLAP`` before a model is built.

The evaluation rows are ``prepare_datasets``'s test set (the dataset's test split, or
MaxText's own train/test split of the training files), or with ``--eval-files`` a declared
parquet set, read like ``prepare_datasets``'s non-split branch (``get_dataset``,
``process_data``, the same long-prompt filter and slice).

With ``--canary-out`` it then scores a serving canary: the first ``--canary-prompts`` of the
same evaluation prompts are sent to an OpenAI-compatible server (served_completions.py,
beside this file) in place of the rollout, and MaxText's ``evaluate`` scores its answers with
the same reward functions, written to the canary's own file; a server that gives no usable
answer leaves ``{"unreachable": reason}`` there instead, and the checkpoint's scores stand.

``--restore-once`` (the rehearsal gives it) restores the checkpoint once: MaxText's own
``load_checkpoint_only_once=true`` makes the actor a copy of the reference model instead of a
second restore. ``evaluate`` reads only the actor's weights, which are the same values either
way; the reference model is built because ``RLCluster`` needs one.

``--cpu-rollout`` installs the rehearsal's stand-in for the vLLM rollout
(train_rl_cpu.py) first; everything else is MaxText's code. On GKE the program runs in the
post-training image as the head of a Pathways JobSet, like training, and starts the way
``train_rl.main`` does (``pathwaysutils.initialize()``, which registers the Pathways proxy
backend when ``JAX_PLATFORMS`` names it and does nothing on CPU).

Usage: evaluate_rl.py --out SCORES.json [--cpu-rollout] [--restore-once] [--eval-files F
       --eval-dataset-name N --eval-split S] [--canary-out CANARY.json --canary-endpoint URL
       --canary-model NAME --canary-prompts N --canary-timeout S] -- <train_rl arguments>
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import multiprocessing.pool  # noqa: F401  # utils_rl needs it imported (train_rl_cpu.py, point 1)
import sys
from pathlib import Path
from typing import Any

OVERLAP_EXIT = 3
RESULT_PREFIX = "EVAL-SCORES "
KEPT_RESPONSES = 8  # sample outputs kept in the scores file, with their question and reward
RESTORE_ONCE = "load_checkpoint_only_once"  # MaxText's: the actor copies the reference model
KEPT_CHARS = 2000  # of each kept question and response: the file stays small on any model


def _rows(dataset: Any) -> list[dict[str, str]]:
    """(question, answer) of every row a batched grain dataset yields, in order."""
    out: list[dict[str, str]] = []
    for batch in dataset:
        for question, answer in zip(batch["question"], batch["answer"], strict=True):
            out.append({"question": str(question), "answer": str(answer)})
    return out


def _declared_test_set(config: Any, tokenizer: Any, files: str, name: str, split: str) -> Any:
    """prepare_datasets' non-split branch (train_rl.py, maxtext-v0.2.4) for declared files."""
    import grain
    from maxtext.input_pipeline.instruction_data_processing import load_data_template_from_file
    from maxtext.trainers.post_train.rl import train_rl, utils_rl

    template = load_data_template_from_file(config.data_template_path)
    custom = getattr(config, "dataset_processor_path", "") or ""
    process = (utils_rl.load_custom_callable(custom, "process_data") if custom
               else utils_rl.process_data)
    data = train_rl.get_dataset(config, split=split, data_files=files, dataset_name=name)
    data = (grain.MapDataset.source(data).shuffle(seed=config.data_shuffle_seed)
            .map(lambda x: process(name, tokenizer, template, config, x)))
    data = data.filter(lambda x: len(tokenizer.tokenize(x["prompts"]))
                       <= config.max_prefill_predict_length)
    size = config.batch_size if getattr(config, "eval_batch_size", -1) <= 0 \
        else config.eval_batch_size
    data = data[config.test_batch_start_index: config.num_test_batches * size]
    return data.to_iter_dataset().batch(size, drop_remainder=True)


class RewardRecorder:
    """Wraps the reward functions ``evaluate`` calls: ``_compute_row_reward`` calls every
    function once per response, in order, with ``completions=[response]`` and the row's
    ``question``, so the first one opens a new sample (and, for the first few, a kept
    response)."""

    def __init__(self, fns: list[Any]) -> None:
        self.samples: list[float] = []
        self.responses: list[dict[str, Any]] = []
        self.wrapped = [self._wrap(i, fn) for i, fn in enumerate(fns)]

    def _wrap(self, index: int, fn: Any) -> Any:
        def call(**kwargs: Any) -> Any:
            scores = fn(**kwargs)
            value = float(scores[0]) if scores else 0.0
            if index == 0:
                self.samples.append(value)
                if len(self.responses) < KEPT_RESPONSES:
                    self.responses.append(_kept(kwargs, value))
            elif self.samples:
                self.samples[-1] += value
                if len(self.responses) == len(self.samples):
                    self.responses[-1]["reward"] = self.samples[-1]
            return scores
        return call


def _kept(kwargs: dict[str, Any], reward: float) -> dict[str, Any]:
    completions = kwargs.get("completions") or [""]
    return {"question": str(kwargs.get("question") or "")[:KEPT_CHARS],
            "response": str(completions[0])[:KEPT_CHARS], "reward": reward}


def _cpu_prompt_length(rl_cluster: Any, config: Any) -> None:
    """evaluate's RolloutConfig carries no max_prompt_length (vLLM reads the prompt as it
    is); the CPU stand-in pads to it, so give it the training's prefill length."""
    import dataclasses

    generate = rl_cluster.rollout.generate

    def with_prompt_length(prompts: Any, rollout_config: Any, **kwargs: Any) -> Any:
        rollout_config = dataclasses.replace(
            rollout_config, max_prompt_length=int(config.max_prefill_predict_length))
        return generate(prompts, rollout_config=rollout_config, **kwargs)

    rl_cluster.rollout.generate = with_prompt_length


def evaluate_checkpoint(args: argparse.Namespace) -> dict[str, Any]:
    from flax import nnx
    from maxtext.configs import types
    from maxtext.trainers.post_train.rl import evaluate_rl, train_rl
    from maxtext.utils import model_creation_utils
    from transformers import AutoTokenizer

    argv = [train_rl.__file__, *args.train_rl_argv]
    config, sampler_config, trainer_devices, sampler_devices = \
        model_creation_utils.setup_configs_and_devices(argv, {}, config_class=types.RLConfig)
    tokenizer = AutoTokenizer.from_pretrained(config.tokenizer_path,
                                              token=config.hf_access_token or None)
    train_rl.configure_tokenizer_chat_template(tokenizer, config)
    train_dataset, test_dataset = train_rl.prepare_datasets(config, tokenizer)
    if args.eval_files:
        test_dataset = _declared_test_set(config, tokenizer, args.eval_files,
                                          args.eval_dataset_name, args.eval_split)
    trained, held_out = _rows(train_dataset), _rows(test_dataset)
    seen = {row["question"] for row in trained}
    overlap = [row["question"] for row in held_out if row["question"] in seen]
    if overlap:
        print(f"EVAL-OVERLAP {len(overlap)} of {len(held_out)} evaluation rows were trained on, "
              f"e.g. {overlap[0][:120]!r}", file=sys.stderr, flush=True)
        raise SystemExit(OVERLAP_EXIT)
    if not held_out:
        print("EVAL-EMPTY the evaluation set has no rows after MaxText's long-prompt filter",
              file=sys.stderr, flush=True)
        raise SystemExit(OVERLAP_EXIT)
    reference, reference_mesh, actor, actor_mesh, rollout_mesh = \
        model_creation_utils.create_models_and_meshes(
            config, sampler_config, trainer_devices, sampler_devices,
            tokenizer_pad_id=tokenizer.pad_token_id)
    rl_cluster, _, _, reward_fns = train_rl.create_rl_components(
        config, sampler_config, sampler_devices, actor, actor_mesh, reference, reference_mesh,
        rollout_mesh, tokenizer)
    if args.cpu_rollout:
        _cpu_prompt_length(rl_cluster, config)
    rl_cluster.rollout.update_params(nnx.state(actor, nnx.Param))  # as _rl_train_impl does
    scores = _scored(evaluate_rl, config, test_dataset, rl_cluster, reward_fns,
                     str(config.load_parameters_path))
    scores.update({"trained_rows_checked": len(trained),
                   "questions": sorted(row["question"] for row in held_out)})
    if args.canary_out:
        _write(args.canary_out, _canary(args, evaluate_rl, config, test_dataset, rl_cluster,
                                        reward_fns))
    return scores


def _scored(evaluate_rl: Any, config: Any, dataset: Any, rl_cluster: Any, reward_fns: Any,
            checkpoint: str) -> dict[str, Any]:
    """MaxText's evaluate over ``dataset`` with the recorded reward functions, as JSON."""
    recorder = RewardRecorder(list(reward_fns))
    (corr, total, accuracy, partial, format_accuracy, mean_reward), _ = evaluate_rl.evaluate(
        config, dataset, rl_cluster=rl_cluster, num_passes=config.num_eval_passes,
        corr_lst=config.eval_corr_lst, make_lst=config.eval_make_lst,
        reward_fns=recorder.wrapped)
    return {"checkpoint": checkpoint, "total": int(total),
            "correct": float(corr), "accuracy_pct": float(accuracy),
            "partial_accuracy_pct": float(partial), "format_accuracy_pct": float(format_accuracy),
            "format_correct": round(float(format_accuracy) * int(total) / 100.0, 6),
            "mean_reward": float(mean_reward), "rewards": recorder.samples,
            # the functions that scored, as MaxText built them (a recipe's through its guard)
            "reward_functions": [str(getattr(fn, "__name__", fn)) for fn in reward_fns],
            "eval_mode": str(getattr(config, "eval_mode", "pass")),
            "num_eval_passes": int(config.num_eval_passes),
            "sampling": str(config.eval_sampling_strategy), "overlap": 0,
            "responses": recorder.responses}


def first_prompts(dataset: Any, count: int) -> list[dict[str, Any]]:
    """The dataset's first ``count`` rows as batches (the last one cut): what the canary
    sends, the same rows in the same order as the checkpoint's first ones."""
    out: list[dict[str, Any]] = []
    left = count
    for batch in dataset:
        if left <= 0:
            break
        size = len(batch["question"])
        out.append(batch if size <= left else {k: v[:left] for k, v in batch.items()})
        left -= min(size, left)
    return out


def _canary(args: argparse.Namespace, evaluate_rl: Any, config: Any, dataset: Any,
            rl_cluster: Any, reward_fns: Any) -> dict[str, Any]:
    """The served model's scores on the first prompts, or why there are none."""
    import os

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from served_completions import (
        API_KEY_ENV,
        CanaryUnreachable,
        ServedCompletions,
        served_generate,
    )

    try:
        client = ServedCompletions(args.canary_endpoint, args.canary_model,
                                   args.canary_timeout, os.environ.get(API_KEY_ENV, ""))
        rl_cluster.rollout.generate = served_generate(client)
        scores = _scored(evaluate_rl, config, first_prompts(dataset, args.canary_prompts),
                         rl_cluster, reward_fns,
                         f"served {args.canary_model} at {args.canary_endpoint}")
    except CanaryUnreachable as exc:
        print(f"CANARY-UNREACHABLE {exc}", file=sys.stderr, flush=True)
        return {"unreachable": str(exc)}
    scores["requests"] = client.requests
    return scores


def _write(path: str, data: dict[str, Any]) -> None:
    from etils import epath

    out = epath.Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=1, sort_keys=True))


def parse_args(argv: list[str]) -> argparse.Namespace:
    """Our options, then train_rl's arguments through absl's flags exactly as ``app.run``
    parses them for ``train_rl.main`` (maxtext-v0.2.4 train_rl.py:843-844 ``app.run(main)``;
    absl app.py ``parse_flags_with_usage``: FLAGS(argv) takes the absl flags the imported
    libraries define, refuses an unknown ``--flag`` with "FATAL Flags parsing error" and
    exit 1, and returns the rest, which main hands to the config). Without it FLAGS stay
    unparsed, and a library reading one raises UnparsedFlagAccessError where training runs."""
    from absl import app

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="where the scores JSON is written")
    parser.add_argument("--cpu-rollout", action="store_true",
                        help="use the rehearsal's CPU stand-in for the vLLM rollout")
    parser.add_argument("--restore-once", action="store_true",
                        help="the actor is a copy of the reference model, not a second restore")
    parser.add_argument("--eval-files", default="")
    parser.add_argument("--eval-dataset-name", default="")
    parser.add_argument("--eval-split", default="train")
    parser.add_argument("--canary-out", default="", help="the serving canary's scores JSON")
    parser.add_argument("--canary-endpoint", default="")
    parser.add_argument("--canary-model", default="")
    parser.add_argument("--canary-prompts", type=int, default=0)
    parser.add_argument("--canary-timeout", type=float, default=60.0)
    parser.add_argument("train_rl_argv", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv[1:])
    rest = [a for a in args.train_rl_argv if a != "--"]
    args.train_rl_argv = app.parse_flags_with_usage([argv[0], *rest])[1:]
    if args.restore_once and not any(a.startswith(f"{RESTORE_ONCE}=")
                                     for a in args.train_rl_argv):
        args.train_rl_argv.append(f"{RESTORE_ONCE}=true")
    return args


def prepare_cpu_rollout() -> None:
    """The rehearsal's stand-in rollout (train_rl_cpu.py), and its training launcher's
    collector rule (decision 0045): the imports, those of ``evaluate_checkpoint`` included,
    run with the cycle collector off and are then frozen out of its reach, so Tunix's
    collections at each weight sync walk only what evaluating creates, which is collected as
    before. Measured on the rehearsal's trained checkpoint: 19.2 CPU-s against 24.3-26.6,
    the same scores file. TensorFlow is left out as in training (``leave_tensorflow_out``):
    another 0.8 CPU-s, the same scores file."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from train_rl_cpu import (
        STAND_IN_NOTICE,
        freeze_imports,
        install_stand_ins,
        leave_tensorflow_out,
    )

    print(STAND_IN_NOTICE, file=sys.stderr, flush=True)
    gc.disable()
    leave_tensorflow_out()
    install_stand_ins()
    import flax.nnx  # noqa: F401
    import maxtext.configs.types
    import maxtext.trainers.post_train.rl.evaluate_rl
    import maxtext.utils.model_creation_utils  # noqa: F401
    import transformers  # noqa: F401

    freeze_imports()


def run(args: argparse.Namespace) -> None:
    logging.basicConfig(level=logging.INFO)
    if args.cpu_rollout:
        prepare_cpu_rollout()
    import pathwaysutils
    from maxtext.trainers.post_train.rl import train_rl

    pathwaysutils.initialize()  # before any device is asked for, as train_rl.main
    with train_rl._tpu_inference_compat_patches():  # what rl_train wraps its body in
        scores = evaluate_checkpoint(args)
    _write(args.out, scores)
    summary = {k: v for k, v in scores.items() if k not in ("rewards", "questions", "responses")}
    print(RESULT_PREFIX + json.dumps(summary, sort_keys=True), flush=True)


def main() -> None:
    """Started as train_rl is: under absl's app.run (flags parsed, absl logging set up)."""
    from absl import app

    app.run(run, flags_parser=parse_args)


if __name__ == "__main__":
    main()
