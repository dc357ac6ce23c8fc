"""A run's throughput from the programs' own metrics: tokens per second per chip, the step's
seconds split into rollout, training and weight sync, and dollars per million tokens at the
run's price (pure).

What Tunix 0.1.8 and MaxText 0.2.4 log, and so what can be measured:

- every GRPO step, the completions' mean length (``completions/train/mean_length``,
  rl/grpo/grpo_learner.py), from which the step's generated tokens follow: mean length x
  ``batch_size`` x ``num_generations`` completions;
- the step's duration: the gap between two steps' completion-length records in one event
  file (flows/runpage/metrics.py ``step_durations``), checkpoint saves included;
- with ``enable_tunix_perf_metrics: true`` in train.args (MaxText's key, off in rl.yml),
  Tunix's perf tracer adds per step ``perf/global_step_time``, ``perf/weight_sync_time``,
  ``perf/sum/rollout_time`` and ``perf/sum/actor_train_time`` (tunix/perf/export.py, logged
  under the ``train`` mode as ``perf/train/...``): the split, and the step time itself;
- no FLOPs and no MFU: MaxText 0.2.4's ``per_device_tflops`` and MFU come from its
  pre-training and SFT hooks (common/metric_logger.py, trainers/post_train/hooks.py), which
  train_rl does not install. The figure says so rather than estimating one.

Tokens here are generated (completion) tokens only; prompts are not counted, because Tunix
logs no prompt length. A comparison with a framework that counts prompt and completion
tokens must say so (docs/explanation/throughput.md).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel

COMPLETION_LENGTH = "completions/train/mean_length"
PERF_STEP = "perf/train/global_step_time"
PERF_ROLLOUT = "perf/train/sum/rollout_time"
PERF_TRAINING = "perf/train/sum/actor_train_time"
PERF_WEIGHT_SYNC = "perf/train/weight_sync_time"
PERF_SWITCH = "enable_tunix_perf_metrics"
MFU_NOTE = ("not reported: MaxText 0.2.4's train_rl logs no FLOPs (its MFU is pre-training's "
            "and SFT's)")
CPU_LABEL = "CPU rehearsal: one CPU process, not a TPU figure"


class Throughput(BaseModel):
    """What one run measured, per chip, at its price; ``None`` where nothing logged it."""

    hardware: str  # "v6e 2x4, 8 chips" or CPU_LABEL
    chips: int  # what "per chip" divides by: the slice's chips, 1 for the rehearsal
    steps_measured: int
    step_s: float  # the median step, the first left out when more were measured
    step_source: str
    rollout_s: float | None = None
    training_s: float | None = None
    weight_sync_s: float | None = None
    completions_per_step: int
    completion_tokens_per_step: float | None = None
    tokens_per_s_per_chip: float | None = None
    usd_per_chip_hour: float = 0.0
    usd_per_million_tokens: float | None = None  # the steps alone, start-up left out
    mfu: float | None = None
    mfu_note: str = MFU_NOTE
    cpu: bool = False


def _steady(values: Sequence[float]) -> float | None:
    """The median, leaving out the first value when there are three or more (its step
    compiled); None for no value."""
    kept = list(values[1:] if len(values) >= 3 else values)
    return statistics.median(kept) if kept else None


def _tag_values(steps: Sequence[Mapping[str, Any]], tag: str) -> list[float]:
    return [float(s[tag]) for s in steps if isinstance(s.get(tag), int | float)]


def measure(metrics: Mapping[str, Any], completions_per_step: int, chips: int,
            usd_per_chip_hour: float, hardware: str, cpu: bool = False) -> Throughput | None:
    """The run's throughput from ``metrics`` (flows/runpage/metrics.py ``summarize_run``),
    or None when no step's duration was logged (one step, or no event file)."""
    steps = metrics.get("steps") or []
    perf_steps = _tag_values(steps, PERF_STEP)
    if perf_steps:
        step_s, source, count = _steady(perf_steps), f"Tunix perf metrics ({PERF_STEP})", \
            len(perf_steps)
    else:
        clock = [float(s) for _step, s in metrics.get("step_seconds") or [] if s > 0]
        step_s, source, count = _steady(clock), ("event times: the gap between two steps' "
                                                 f"{COMPLETION_LENGTH} records"), len(clock)
    if step_s is None or step_s <= 0 or chips <= 0:
        return None
    length = _steady(_tag_values(steps, COMPLETION_LENGTH))
    tokens = length * completions_per_step if length is not None else None
    per_chip = tokens / step_s / chips if tokens else None
    usd = (usd_per_chip_hour * chips * step_s / 3600.0 / tokens * 1e6
           if tokens and usd_per_chip_hour > 0 else None)
    return Throughput(
        hardware=hardware, chips=chips, steps_measured=count, step_s=round(step_s, 3),
        step_source=source, rollout_s=_rounded(_steady(_tag_values(steps, PERF_ROLLOUT))),
        training_s=_rounded(_steady(_tag_values(steps, PERF_TRAINING))),
        weight_sync_s=_rounded(_steady(_tag_values(steps, PERF_WEIGHT_SYNC))),
        completions_per_step=completions_per_step,
        completion_tokens_per_step=_rounded(tokens),
        tokens_per_s_per_chip=_rounded(per_chip), usd_per_chip_hour=usd_per_chip_hour,
        usd_per_million_tokens=_rounded(usd), cpu=cpu)


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def split_text(t: Throughput) -> str:
    if t.rollout_s is None and t.training_s is None and t.weight_sync_s is None:
        return f"split not logged (set train.args.{PERF_SWITCH}: true)"
    parts = (("rollout", t.rollout_s), ("training", t.training_s),
             ("weight sync", t.weight_sync_s))
    return ", ".join(f"{name} {value:.1f} s" for name, value in parts if value is not None)


def summary_line(t: Throughput) -> str:
    """One line for the run page, the result's log, `tpurl status` and the team view."""
    rate = ("tokens/s per chip not known (no completion length logged)"
            if t.tokens_per_s_per_chip is None else
            f"{t.tokens_per_s_per_chip:,.1f} generated tokens/s per chip")
    money = ("" if t.usd_per_million_tokens is None else
             f", ${t.usd_per_million_tokens:,.2f} per million tokens at "
             f"${t.usd_per_chip_hour:.2f}/chip-h (steps only)")
    label = f"{t.hardware}: " if not t.cpu else f"{CPU_LABEL}: "
    return (f"{label}{rate}{money}; step {t.step_s:.1f} s (median of {t.steps_measured}; "
            f"{split_text(t)}); MFU {t.mfu_note if t.mfu is None else f'{t.mfu:.1%}'}")


def line_of(data: Mapping[str, Any] | None) -> str | None:
    """``summary_line`` of a result's stored figure, or None when there is none or it does
    not read as one: what a bucket holds is untrusted, and a damaged figure never stops
    `tpurl status`, the run page or the team view."""
    if not data:
        return None
    try:
        return summary_line(Throughput.model_validate(data))
    except ValueError:  # pydantic's ValidationError is one
        return None


def completions_per_step(train_args: Mapping[str, Any]) -> int:
    """``batch_size`` x ``num_generations`` of the profile's train.args over rl.yml's
    defaults: the completions one GRPO step generates."""
    from flows.config.maxtext_models import rl_defaults

    defaults = rl_defaults()

    def number(*keys: str) -> int:
        for key in keys:
            if key in train_args:
                return int(float(str(train_args[key])))
        return int(float(str(defaults[keys[-1]])))

    return number("batch_size") * number("num_generations", "rl.num_generations")
