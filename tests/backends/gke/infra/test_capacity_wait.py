"""The stockout model behind `tpurl plan --compare-capacity`'s chain and the month benchmark
(flows/backends/gke/infra/capacity_wait.py; benchmarks/simulation/): its closed forms, the seeded
simulation of a policy, and the plan's lines for a chain over zones."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.simulation.month import MonthAssumptions
from benchmarks.simulation.policy_month import simulate_policy
from benchmarks.simulation.stockouts import Stockouts, time_to_slice
from flows.backends.gke.infra.capacity_wait import (
    STOCKOUTS,
    ModeStockouts,
    Step,
    chain_expected_wait_h,
    expected_wait_h,
    miss_probability,
)
from flows.backends.gke.infra.cost import chain_lines
from tests.support.profiles import capacity_profile

ZONES = ("us-east5-b", "us-east5-a", "us-east5-c")
model_figures = st.builds(ModeStockouts, st.floats(0.01, 0.9), st.floats(0.1, 24.0))


@given(figures=model_figures, budget=st.floats(0.05, 48.0))
def test_more_zones_never_wait_longer_nor_miss_more(figures, budget):
    waits = [expected_wait_h(figures, k, budget) for k in (1, 2, 3)]
    misses = [miss_probability(figures, k, budget) for k in (1, 2, 3)]
    assert waits == sorted(waits, reverse=True) and misses == sorted(misses, reverse=True)
    assert expected_wait_h(figures, 1, budget) <= min(budget, expected_wait_h(figures, 1))


def test_the_closed_form_matches_the_sampled_calendar():
    """p·D for one zone with no budget: the long-run mean of the sampled residual waits
    (the autoscaler's backoff adds at most 30 min to each; none here where p is 0)."""
    figures = ModeStockouts(0.3, 6.0)
    stock = Stockouts({"on-demand": figures}, 200_000.0, "closed-form")
    asks = [t * 7.3 for t in range(20_000)]
    mean = sum(stock.back_at("on-demand", "z", t) - t for t in asks) / len(asks)
    assert math.isclose(mean, expected_wait_h(figures, 1), rel_tol=0.1)


def test_a_chain_tries_each_mode_for_its_budget_in_order():
    always_out = ModeStockouts(0.999999, 1e6)
    model = {"flex-start": always_out, "on-demand": always_out, "spot": ModeStockouts(0, 0)}
    steps = [Step("flex-start", ZONES, 6.0), Step("on-demand", ZONES, 0.5),
             Step("spot", ZONES[:1], 0.5)]
    wait, mode, zone = time_to_slice(steps, Stockouts(model, 1e7, "order"), 10.0)
    assert (wait, mode, zone) == (6.5, "spot", ZONES[0])
    # the closed form agrees: both first modes wait out their budgets, spot is there
    assert math.isclose(chain_expected_wait_h(steps, model), 6.5, rel_tol=1e-3)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_a_policy_month_is_reproducible_and_pays_only_for_held_slices(seed):
    a = MonthAssumptions(seed=seed, days=14)
    prices = {"on-demand": 2.7, "spot": 1.0}
    steps = [Step("on-demand", ZONES, 0.5), Step("spot", ZONES, 0.5)]
    one = simulate_policy("p", steps, STOCKOUTS, prices, a, months=3)
    assert one == simulate_policy("p", steps, STOCKOUTS, prices, a, months=3)
    assert len(one.waits_h) == one.runs and min(one.waits_h) >= 0
    floor = one.runs * (a.train_h + a.provision_h) * a.chips * min(prices.values())
    assert one.usd >= floor - 1e-6
    assert set(k.split()[0] for k in one.served) <= {"on-demand", "spot"}


def test_the_plan_lists_every_mode_and_zone_the_worst_case_and_the_cap():
    profile = capacity_profile("flex-start,on-demand,spot", **{
        "gke.zones": ",".join(ZONES), "gke.max_usd_per_run": "500"})
    lines = chain_lines(profile)
    rows = [line.split() for line in lines if line.startswith("  ") and len(line.split()) > 3
            and line.split()[1] in ZONES]
    assert [(r[0], r[1]) for r in rows] == [(m, z) for m in ("flex-start", "on-demand", "spot")
                                            for z in ZONES]
    text = "\n".join(lines)
    assert "worst case, every mode waits its budget: 6 + 0.5 + 0.5 = 7 h" in text
    assert "spend cap: gke.max_usd_per_run $500.00 against $374.40" in text
    assert "priciest mode (on-demand)" in text
