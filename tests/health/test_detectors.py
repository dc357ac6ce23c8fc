"""The training-health detectors over recorded metric streams: the rehearsal's own reward
(recorded from a real rehearsal run, tests/golden/health/), clean GRPO-shaped runs and runs
that hack (tests/support/health_streams.py). Each hack fires its detector at or after its
onset and no other; clean streams fire nothing; each threshold's boundary is tested equal to
the limit and one step short of it."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flows.config.health import GroupCollapse, HealthSection, LengthDrift, RewardDominance, Runaway
from flows.health.detectors import (
    DETECTORS,
    EXCERPT_STEPS,
    examine,
    group_collapse,
    length_drift,
    reward_dominance,
    runaway,
    zero_spread_fraction,
)
from tests.support import health_streams as hs

HEALTH = HealthSection()


def test_the_rehearsals_own_reward_fires_nothing() -> None:
    steps = hs.recorded("rehearsal-own-reward")
    assert any("rewards/train/ascii_fraction_reward" in row for row in steps)
    assert examine(steps, HEALTH, heldout_gain=0.0) == []


@pytest.mark.parametrize("seed", range(20))
def test_clean_runs_fire_nothing(seed: int) -> None:
    assert examine(hs.clean(seed), HEALTH, hs.CLEAN_HELDOUT_GAIN) == []


@pytest.mark.parametrize("detector", DETECTORS)
@pytest.mark.parametrize("seed", range(5))
def test_each_hack_fires_its_own_detector_after_its_onset(detector: str, seed: int) -> None:
    make, gain = hs.HACKS[detector]
    found = examine(make(seed), HEALTH, gain)
    assert [f.detector for f in found] == [detector]
    finding = found[0]
    assert finding.step >= (hs.ONSET if detector != "heldout_gap" else hs.STEPS - 1)
    assert finding.summary and finding.figures
    assert 1 <= len(finding.excerpt) <= EXCERPT_STEPS
    assert finding.excerpt[-1]["step"] == finding.step


def test_a_constant_reward_collapses_every_group_from_its_second_step() -> None:
    steps = [{"step": s, "rewards/train/mean": 1.0, "rewards/train/min": 1.0,
              "rewards/train/max": 1.0} for s in range(2)]
    found = group_collapse(steps, GroupCollapse())
    assert found is not None and found.step == 1 and found.figures["fraction"] == 1.0
    assert group_collapse(steps[:1], GroupCollapse()) is None  # one step: chance


def test_a_step_whose_groups_vary_breaks_the_collapse_streak() -> None:
    same = {"rewards/train/mean": 1.0, "rewards/train/min": 1.0, "rewards/train/max": 1.0}
    varied = {"rewards/train/mean": 1.0, "rewards/train/min": 0.5, "rewards/train/max": 1.5}
    steps = [{"step": 0, **same}, {"step": 1, **varied}, {"step": 2, **same}]
    assert group_collapse(steps, GroupCollapse()) is None


@pytest.mark.parametrize(("fraction", "fires"), [(0.9, True), (0.8999, False)])
def test_a_logged_fraction_at_the_limit_counts(fraction: float, fires: bool) -> None:
    steps = [{"step": s, "frac_reward_zero_std": fraction, "rewards/train/min": 0.0,
              "rewards/train/max": 1.0} for s in range(2)]
    assert (group_collapse(steps, GroupCollapse()) is not None) is fires
    assert zero_spread_fraction(steps[0]) == fraction


def _two_functions(a_end: float, b_end: float) -> list[dict[str, float]]:
    """Six steps: the first three at (0.5, 0.5), the last three at the ends given."""
    rows = []
    for step in range(6):
        a, b = (0.5, 0.5) if step < 3 else (a_end, b_end)
        rows.append({"step": step, "rewards/train/a": a, "rewards/train/b": b,
                     "rewards/train/mean": a + b})
    return rows


@pytest.mark.parametrize(("b_end", "fires"), [(0.4, True), (0.40001, False)])
def test_dominance_needs_each_other_function_to_fall_by_min_fall(b_end: float,
                                                                 fires: bool) -> None:
    found = reward_dominance(_two_functions(0.9, b_end), RewardDominance(min_fall=0.1))
    assert (found is not None) is fires
    if found:
        assert found.step == 5 and "rewards/train/a" in found.excerpt[-1]


def test_dominance_needs_the_rise_to_outweigh_the_falls() -> None:
    # a rises 0.1 while b falls 0.3: the total fell; that is a failing run, not a hack
    assert reward_dominance(_two_functions(0.6, 0.2), RewardDominance()) is None


def test_one_reward_function_is_never_judged_by_dominance() -> None:
    rows = [{"step": s, "rewards/train/a": s * 0.1, "rewards/train/mean": s * 0.1}
            for s in range(10)]
    assert reward_dominance(rows, RewardDominance()) is None


def test_length_drift_needs_both_the_change_and_the_correlation() -> None:
    grows = [{"step": s, "completions/train/mean_length": 100.0 + 20 * s,
              "rewards/train/mean": 0.1 * s} for s in range(6)]
    found = length_drift(grows, LengthDrift())
    assert found is not None and found.figures["correlation"] > 0.99
    # same growth, reward unrelated to it: no finding
    unrelated = [{**row, "rewards/train/mean": (-1) ** row["step"]} for row in grows]
    assert length_drift(unrelated, LengthDrift()) is None
    # reward follows length, but length moved less than min_change
    small = [{**row, "completions/train/mean_length": 100.0 + row["step"]} for row in grows]
    assert length_drift(small, LengthDrift()) is None


@pytest.mark.parametrize(("value", "fires"), [(1.0, True), (0.99999, False)])
def test_runaway_at_factor_times_its_early_median(value: float, fires: bool) -> None:
    rows = [{"step": s, "actor/train/kl": v} for s, v in enumerate([0.1, 0.1, 0.1, value])]
    found = runaway(rows, Runaway(factor=10, floor=0.05), "actor/train/kl", "kl_runaway")
    assert (found is not None) is fires


def test_runaway_below_its_floor_never_fires() -> None:
    rows = [{"step": s, "actor/train/kl": v} for s, v in enumerate([0.0, 0.0, 0.001, 0.04])]
    assert runaway(rows, Runaway(floor=0.05), "actor/train/kl", "kl_runaway") is None


def test_a_non_finite_statistic_is_divergence() -> None:
    rows = [{"step": 0, "actor/train/grad_norm": 1.0}, {"step": 1, "actor/train/grad_norm":
                                                         math.inf}]
    found = runaway(rows, Runaway(), "actor/train/grad_norm", "grad_norm_runaway")
    assert found is not None and found.step == 1


def test_the_held_out_gap_needs_the_evaluation() -> None:
    steps = hs.rising(0)
    assert examine(steps, HEALTH) == []
    assert [f.detector for f in examine(steps, HEALTH, 0.0)] == ["heldout_gap"]
    assert examine(steps, HEALTH, 0.0001) == []  # just above max_heldout_gain 0.0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.dictionaries(
    st.sampled_from(["rewards/train/a", "rewards/train/b", "rewards/train/mean",
                     "rewards/train/min", "rewards/train/max", "completions/train/mean_length",
                     "actor/train/kl", "actor/train/grad_norm", "frac_reward_zero_std"]),
    st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True, width=32))),
    max_size=30), st.randoms())
def test_any_stream_in_any_order_gives_the_same_findings_and_never_raises(
        rows: list[dict[str, float | None]], rng: object) -> None:
    steps = [{"step": index, **row} for index, row in enumerate(rows)]
    shuffled = list(steps)
    rng.shuffle(shuffled)  # type: ignore[attr-defined]
    assert examine(steps, HEALTH, 0.0) == examine(shuffled, HEALTH, 0.0)
