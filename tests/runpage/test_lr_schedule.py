"""The metrics' learning rate follows MaxText's RL schedule: MaxText 0.2.4's RL optimizer
(maxtext/trainers/post_train/rl/utils_rl.py, ``get_optimizer``) is optax's
``warmup_cosine_decay_schedule``, from 0 up to ``learning_rate`` over
``int(warmup_steps_fraction × steps)`` steps (base.yml: 0.1), then a cosine decay to 0 by the
last step. The rehearsal's logged value, half the configured one, is what that schedule gives,
and what the metrics table's note says."""

from __future__ import annotations

import math

import pytest

from flows.config import load_profile
from flows.runpage.artifacts import LR_NOTE


def scheduled_learning_rate(peak: float, step: int, steps: int,
                            warmup_fraction: float = 0.1) -> float:
    """The rate optax's warmup_cosine_decay_schedule(0, peak, warmup, steps, 0) gives."""
    warmup = int(warmup_fraction * steps)
    if step < warmup:
        return peak * step / warmup
    decay = max(steps - warmup, 1)
    done = min(step - warmup, decay) / decay
    return peak * 0.5 * (1 + math.cos(math.pi * done))


def test_the_rehearsal_logs_half_its_configured_rate_at_step_1():
    profile = load_profile("rehearsal")
    peak, steps = float(profile.train.args["learning_rate"]), int(profile.train.args["num_batches"])
    assert steps == 2
    assert scheduled_learning_rate(peak, 0, steps) == peak  # no warmup: int(0.1 × 2) == 0
    assert scheduled_learning_rate(peak, 1, steps) == pytest.approx(peak / 2)
    assert "half the peak" in LR_NOTE


def test_longer_runs_warm_up_then_decay():
    assert scheduled_learning_rate(1.0, 0, 20) == 0.0
    assert scheduled_learning_rate(1.0, 1, 20) == pytest.approx(0.5)  # warmup of 2 steps
    assert scheduled_learning_rate(1.0, 2, 20) == pytest.approx(1.0)
    assert scheduled_learning_rate(1.0, 20, 20) == pytest.approx(0.0)
