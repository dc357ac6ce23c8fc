"""Why the metrics' learning rate is not the configured one: MaxText's RL schedule.

MaxText 0.2.4's RL optimizer (maxtext/trainers/post_train/rl/utils_rl.py, ``get_optimizer``)
is optax's ``warmup_cosine_decay_schedule``: from 0 up to ``learning_rate`` over
``int(warmup_steps_fraction × steps)`` steps (base.yml: 0.1), then a cosine decay to 0 by
the last step. So the logged value is the schedule's at that step: with the rehearsal's 2
steps there is no warmup (int(0.2) = 0) and step 1 runs at exactly half the peak.
"""

from __future__ import annotations

import math

WARMUP_STEPS_FRACTION = 0.1  # maxtext/configs/base.yml warmup_steps_fraction


def scheduled_learning_rate(peak: float, step: int, steps: int,
                            warmup_fraction: float = WARMUP_STEPS_FRACTION) -> float:
    """The rate optax's warmup_cosine_decay_schedule(0, peak, warmup, steps, 0) gives."""
    warmup = int(warmup_fraction * steps)
    if step < warmup:
        return peak * step / warmup
    decay = max(steps - warmup, 1)
    done = min(step - warmup, decay) / decay
    return peak * 0.5 * (1 + math.cos(math.pi * done))


NOTE = ("learning_rate is the schedule's value at that step, not the configured peak: MaxText "
        "warms up linearly over 10 % of the steps, then decays it along a cosine to 0 by the "
        "last step (with 2 steps: no warmup, step 1 at half the peak)")
