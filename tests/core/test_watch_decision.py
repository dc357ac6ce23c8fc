"""The watch's sequential test (flows/core/watch_decision.py), pure: the shares of alpha
never sum past it, a rise or a drop under min_drop never regresses, a larger drop never
turns a regression into a hold, and a score with no spread decides nothing."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flows.core.scores import Interval
from flows.core.watch_decision import alpha_share, judge_watch, z_threshold

alphas = st.floats(0.001, 0.49)
numbers = st.integers(1, 10_000)
values = st.floats(-5, 5, allow_nan=False)
halves = st.floats(0.001, 2)


def _at(value: float, half: float) -> Interval:
    return Interval(value=value, low=value - half, high=value + half)


@given(alphas, st.integers(1, 5000))
def test_the_shares_of_any_number_of_watches_sum_below_alpha(alpha, watches):
    spent = math.fsum(alpha_share(alpha, k) for k in range(1, watches + 1))
    assert spent < alpha
    assert alpha_share(alpha, watches + 1) < alpha_share(alpha, watches)


@given(alphas, numbers)
def test_a_later_watch_needs_a_larger_z(alpha, k):
    assert z_threshold(alpha, k + 1) > z_threshold(alpha, k) > 0


@given(values, halves, halves, st.floats(0, 5), numbers, alphas, st.floats(0, 1))
def test_a_rise_or_no_drop_never_regresses(ref, h1, h2, rise, k, alpha, min_drop):
    decision = judge_watch("mean_reward", _at(ref, h1), _at(ref + rise, h2), k, alpha, min_drop)
    assert decision.verdict == "holds"


@given(values, halves, halves, st.floats(0, 3), st.floats(0, 3), numbers, alphas)
def test_a_larger_drop_never_turns_a_regression_into_a_hold(ref, h1, h2, d1, d2, k, alpha):
    small, large = sorted((d1, d2))
    first = judge_watch("mean_reward", _at(ref, h1), _at(ref - small, h2), k, alpha)
    second = judge_watch("mean_reward", _at(ref, h1), _at(ref - large, h2), k, alpha)
    assert not first.regressed or second.regressed


@given(values, st.floats(0.01, 2), numbers, alphas)
def test_a_drop_under_min_drop_holds_however_sure(ref, drop, k, alpha):
    tight = _at(ref, 1e-6)
    under = judge_watch("mean_reward", tight, _at(ref - drop, 1e-6), k, alpha,
                        min_drop=drop * 1.001)
    assert under.verdict == "holds"
    at_limit = judge_watch("mean_reward", tight, _at(ref - drop, 1e-6), k, alpha,
                           min_drop=drop)
    assert at_limit.verdict == "regressed", at_limit.reason


@given(values, st.floats(0.01, 3), numbers, alphas)
def test_points_without_spread_decide_nothing(ref, drop, k, alpha):
    decision = judge_watch("accuracy", _at(ref, 0), _at(ref - drop, 0), k, alpha)
    assert decision.verdict == "inconclusive" and "eval.batches" in decision.reason
    # the same score twice (greedy sampling of an unchanged model on one set): no drop
    assert judge_watch("accuracy", _at(ref, 0), _at(ref, 0), k, alpha).verdict == "holds"


def test_the_threshold_and_z_of_one_watch_as_computed_by_hand():
    # alpha 0.05, watch 1: alpha_1 = 0.05 * 6 / pi^2 = 0.030396; z_(1 - alpha_1) = 1.8755
    decision = judge_watch("mean_reward", _at(0.5, 0.0392), _at(0.4, 0.0392), 1, 0.05)
    se = math.hypot(0.0392 / 1.959963984540054, 0.0392 / 1.959963984540054)
    assert decision.alpha_spent == pytest.approx(0.030396, abs=1e-6)
    assert decision.threshold == pytest.approx(1.8755, abs=1e-3)
    assert decision.z == pytest.approx(0.1 / se)
    assert decision.regressed
    # the same drop at watch 1000 spends 3.04e-8 of alpha and needs z > 5.41: it holds
    assert not judge_watch("mean_reward", _at(0.5, 0.0392), _at(0.4, 0.0392), 1000,
                           0.05).regressed


@pytest.mark.parametrize(("alpha", "k"), [(0.0, 1), (1.0, 1), (0.05, 0)])
def test_an_alpha_or_watch_number_out_of_range_is_refused(alpha, k):
    with pytest.raises(ValueError, match=r"alpha|watch_number"):
        alpha_share(alpha, k)


def test_the_benchmark_keeps_false_alarms_within_alpha_and_catches_a_drop():
    """benchmarks/watch.py's quick run: its own check of the bound, and its figures."""
    from tests.support.benchmarks import assert_figures, run_quick

    out = run_quick("watch", "--quick")
    assert_figures(out, "false alarms (sequential):", "false alarms (fixed alpha each watch):",
                   "power on a drop of", "goal: false alarms within alpha, regressions caught: met")
