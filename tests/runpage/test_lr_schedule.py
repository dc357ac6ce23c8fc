"""The metrics' learning rate follows MaxText's RL schedule (optax warmup + cosine decay);
the rehearsal's logged value, half the configured one, is what that schedule gives."""

from __future__ import annotations

import pytest

from flows.config import load_profile
from flows.runpage.lr_schedule import NOTE, scheduled_learning_rate


def test_the_rehearsal_logs_half_its_configured_rate_at_step_1():
    profile = load_profile("rehearsal")
    peak, steps = float(profile.train.args["learning_rate"]), int(profile.train.args["num_batches"])
    assert steps == 2
    assert scheduled_learning_rate(peak, 0, steps) == peak  # no warmup: int(0.1 × 2) == 0
    assert scheduled_learning_rate(peak, 1, steps) == pytest.approx(peak / 2)
    assert "half the peak" in NOTE


def test_longer_runs_warm_up_then_decay():
    assert scheduled_learning_rate(1.0, 0, 20) == 0.0
    assert scheduled_learning_rate(1.0, 1, 20) == pytest.approx(0.5)  # warmup of 2 steps
    assert scheduled_learning_rate(1.0, 2, 20) == pytest.approx(1.0)
    assert scheduled_learning_rate(1.0, 20, 20) == pytest.approx(0.0)
