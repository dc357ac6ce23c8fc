"""The month simulation behind benchmarks/capacity_month.py (benchmarks/simulation/month.py)."""

from __future__ import annotations

import dataclasses

from benchmarks.simulation.month import MonthAssumptions, run_starts, simulate

A = MonthAssumptions()


def test_announcements_during_a_run_coalesce_into_one_follow_up() -> None:
    a = dataclasses.replace(A, retrain_at_h=(100.0, 101.0, 102.5), days=7)
    # weekly at 30; announcement at 100 starts a run (ends 106); 101 and 102.5 → one at 106
    assert run_starts(a, 6.0) == [30.0, 100.0, 106.0]


def test_a_weekly_run_during_a_retrain_waits_for_it() -> None:
    a = dataclasses.replace(A, retrain_at_h=(27.0,), days=7)
    assert run_starts(a, 6.0) == [27.0, 33.0]


def test_the_static_pool_bills_the_whole_month_and_the_others_only_their_runs() -> None:
    static, demand = simulate("reservation", A), simulate("on-demand", A)
    assert static.held_chip_h == 32 * 30 * 24
    assert static.idle_chip_h == static.held_chip_h - static.runs * A.train_h * 32
    assert demand.idle_chip_h == 0.0
    per_run = (A.train_h + A.provision_h + A.scale_down_unneeded_h) * 32
    assert abs(demand.held_chip_h - demand.runs * per_run) < 1e-6


def test_spot_preemptions_repeat_work_since_the_checkpoint_and_are_counted() -> None:
    a = dataclasses.replace(A, spot_preemptions_per_h=0.5)
    spot = simulate("spot", a)
    assert spot.preemptions > 0 and spot.lost_chip_h > 0
    assert spot.busy_chip_h > spot.runs * a.train_h * a.chips  # repeated work was trained
    assert simulate("spot", a) == spot  # the same seed, the same month


def test_flex_start_waits_for_capacity_unbilled() -> None:
    flex = simulate("flex-start", A)
    assert flex.waiting_h == flex.runs * A.flex_wait_h
    assert flex.held_chip_h == simulate("on-demand", A).held_chip_h
