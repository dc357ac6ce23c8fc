"""Which train arguments only say how long a run trains, so a longer or shorter run of the
same training continues the earlier one instead of starting again: pure functions of the
train arguments.

A training run is named by a key of everything that shapes its steps (flows/core/layout.py
``run_key``). ``num_batches`` is left out when the steps a run takes do not depend on it:

- the data: MaxText 0.2.4's ``train_rl.prepare_datasets`` shuffles the whole split with
  ``data_shuffle_seed``, then keeps its first ``num_batches * batch_size * train_fraction``
  rows, repeated ``num_epoch`` times. With ``num_epoch`` 1 the first k batches are the same
  whatever ``num_batches`` is; with more epochs the second epoch starts at a row that moves
  with ``num_batches``, so ``num_batches`` stays in the key then. On resume tunix 0.1.8's
  ``RLLearner`` fast-forwards the iterator by the restored trainer's micro-steps
  (``rl/rl_learner.py``: "Fast forwarded %d micro-batches"; ``sft/peft_trainer.py``
  ``iter_steps`` = train_steps x gradient accumulation). That is the micro-batches the
  earlier run drew when ``rl.num_iterations`` is 1, so the continued run trains on the
  batches it has not seen; with more iterations the trainer steps several times per batch
  and the fast-forward skips batches never trained on, so ``num_batches`` stays in the key.
- the learning rate: MaxText's ``utils_rl.get_optimizer`` builds a warmup-cosine schedule
  over ``learning_rate_schedule_steps`` when that is set, otherwise over ``train_steps``
  (``configs/types.py``: ``num_batches * rl.num_iterations * train_fraction * num_epoch``);
  warmup is ``warmup_steps_fraction`` of it. The key carries the schedule's length in steps
  instead of either argument, so a run whose schedule spans the earlier run's continues it,
  and one whose schedule follows its own length is a different training.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

LENGTH_ARG = "num_batches"
SCHEDULE_ARG = "learning_rate_schedule_steps"
# configs/post_train/rl.yml (MaxText 0.2.4) defaults of what the run's length multiplies
_DEFAULTS = {"num_batches": 4, "rl.num_iterations": 1, "train_fraction": 1.0, "num_epoch": 1}
# the key's stand-in for the two arguments above: the schedule's length, whichever set it
SCHEDULE_KEY = "tpurl:lr_schedule_steps"


def _number(args: Mapping[str, Any], name: str) -> float:
    value = args.get(name, _DEFAULTS[name])
    return float(str(value))


def train_steps(args: Mapping[str, Any]) -> int:
    """The optimizer steps train_rl takes: MaxText's ``train_steps``."""
    return int(_number(args, "num_batches") * _number(args, "rl.num_iterations")
               * _number(args, "train_fraction") * _number(args, "num_epoch"))


def explicit_schedule(args: Mapping[str, Any]) -> int | None:
    """``learning_rate_schedule_steps`` when the profile sets it (above 0), else None."""
    value = args.get(SCHEDULE_ARG)
    if value is None:
        return None
    steps = float(str(value))
    return int(steps) if steps > 0 and math.isfinite(steps) else None


def schedule_steps(args: Mapping[str, Any]) -> int:
    """The length the learning-rate schedule spans. utils_rl.get_optimizer takes
    ``learning_rate_schedule_steps`` when it differs from ``steps`` (= train_steps for RL)
    and train_steps otherwise: the same number either way."""
    return explicit_schedule(args) or train_steps(args)


def schedule_follows_length(args: Mapping[str, Any]) -> bool:
    """True when the schedule is derived from num_batches: a run of another length has
    another learning rate at every step."""
    return explicit_schedule(args) is None


def batches_follow_length(args: Mapping[str, Any]) -> bool:
    """True when a run of another length would not take the earlier run's batches from
    where it stopped: more than one epoch (the second starts at a row that moves with
    num_batches), or more than one GRPO iteration per batch (tunix 0.1.8's resume
    fast-forwards the iterator by the trainer's step count, ``rl.num_iterations`` steps per
    batch, so it would skip batches never trained on)."""
    return _number(args, "num_epoch") != 1 or _number(args, "rl.num_iterations") != 1


def run_args(args: Mapping[str, Any]) -> dict[str, Any]:
    """The train arguments as the run's key sees them: without the run's length when the
    steps do not depend on it, the schedule by its length in steps. A value that is no
    number (MaxText refuses it when the run starts) keys every argument as given."""
    try:
        schedule, order_follows = schedule_steps(args), batches_follow_length(args)
    except ValueError:
        return dict(args)
    keyed = {name: value for name, value in args.items() if name != SCHEDULE_ARG}
    if not order_follows:
        keyed.pop(LENGTH_ARG, None)
    keyed[SCHEDULE_KEY] = schedule
    return keyed


def family_args(args: Mapping[str, Any]) -> dict[str, Any]:
    """What runs that differ only in length and schedule share: a run of this family whose
    schedule differs can be continued only by giving its schedule."""
    keyed = run_args(args)
    keyed.pop(SCHEDULE_KEY, None)
    return keyed


def lower_work_fix(args: Mapping[str, Any]) -> str:
    """What a stop for spend says about training less, so that following it continues the
    stopped run: the length the user picks, and the schedule the run trained with (a
    schedule left to follow the length would change with it, and the run with it)."""
    try:
        schedule: int | None = schedule_steps(args)
    except ValueError:
        schedule = None
    keep = (f" and train.args.{SCHEDULE_ARG}: {schedule} (the schedule this run trains with)"
            if schedule else "")
    return (f"or lower the work: set train.args.{LENGTH_ARG} to the steps you want (at least "
            f"the newest saved step){keep}; the next run continues this one from its newest "
            "checkpoint")
