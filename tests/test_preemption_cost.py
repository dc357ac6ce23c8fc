"""What one preemption of training costs (flows/operations/preemption_cost.py), and the
figures docs/how-to/preemption-cost.md states for the shipped profiles, recomputed."""

from __future__ import annotations

from flows.common.paths import REPO_ROOT
from flows.config.spend import cents_up
from flows.operations.preemption_cost import PreemptionCost, cost_lines, preemption_cost
from tests.support.profiles import smoke_profile, tutorial_profile

PAGE = REPO_ROOT / "docs" / "how-to" / "preemption-cost.md"


def _cap(cost: PreemptionCost, preemptions: int) -> float:
    """The smallest gke.max_usd_per_run, in whole cents, that pays for the plan's estimate
    and ``preemptions``: the figure the page advises."""
    return cents_up(cost.estimate_usd + preemptions * cost.usd)


def test_the_page_states_what_the_code_computes_for_the_shipped_profiles() -> None:
    page = PAGE.read_text()
    for profile in (smoke_profile(), tutorial_profile()):
        missing = [line for line in cost_lines(preemption_cost(profile)) if line not in page]
        assert missing == [], f"{PAGE.name} drifted from {profile.name}'s figures: {missing}"


def test_the_pages_advice_is_what_the_code_computes() -> None:
    page = " ".join(PAGE.read_text().split())
    smoke = preemption_cost(smoke_profile())
    assert f"to at least {_cap(smoke, 1):.2f} (the plan's estimate and one preemption)" in page
    checkpointed = preemption_cost(tutorial_profile(**{"train.args.checkpoint_period": "10"}))
    assert f"(10 keeps at most {checkpointed.lost_min:g} minutes at risk)" in page


def test_the_smoke_run_loses_its_steps_and_pays_its_restart_again() -> None:
    cost = preemption_cost(smoke_profile())
    # 2 min of steps over 4 batches, checkpointed at the 4th: every step may be repeated;
    # registration 3 + checkpoint load 1 + vLLM 2 + compiles 4 billed, pull 20 + scale-up 10 not
    assert (cost.step_min, cost.checkpoint_period, cost.lost_min) == (0.5, 4, 2.0)
    assert (cost.restart_billed_min, cost.restart_unbilled_min) == (10.0, 30.0)
    assert round(cost.usd, 2) == round(12 / 60 * 8 * 2.70, 2)
    assert cost.budget == 3 and cost.wall_min == 42.0


def test_a_cap_with_room_for_one_preemption_pays_for_one_and_no_more() -> None:
    cost = preemption_cost(smoke_profile())
    assert cost.preemptions_in_cap == 0  # $14.50 stands $2.62 above the $11.88 estimate
    assert _cap(cost, 1) == 16.21  # $11.88072 and $4.32, to the cent above
    roomy = preemption_cost(smoke_profile(**{"gke.max_usd_per_run": f"{_cap(cost, 1)}"}))
    assert roomy.preemptions_in_cap == 1
    short = preemption_cost(smoke_profile(**{"gke.max_usd_per_run": f"{_cap(cost, 1) - 0.01}"}))
    assert short.preemptions_in_cap == 0
    twice = preemption_cost(smoke_profile(**{"gke.max_usd_per_run": f"{_cap(cost, 2) - 0.01}"}))
    assert twice.preemptions_in_cap == 1


def test_a_shorter_checkpoint_period_loses_less_and_a_budget_is_the_profiles() -> None:
    every_step = preemption_cost(smoke_profile(**{"train.args.checkpoint_period": "1"}))
    assert every_step.lost_min == every_step.step_min == 0.5
    assert preemption_cost(smoke_profile(**{"gke.preemption_budget": "1"})).budget == 1
    # without a timeline the step is the training estimate over the steps and the restart
    # is not counted: MaxText's RL period (50) covers the tutorial's 50 batches
    tutorial = preemption_cost(tutorial_profile())
    assert (tutorial.step_min, tutorial.lost_min, tutorial.restart_stated) == (4.8, 240.0, False)
    assert tutorial.cap_usd is None and tutorial.preemptions_in_cap is None


def test_queued_capacity_bills_the_heads_image_pull_of_the_restart() -> None:
    price = {"gke.prices.queued.usd_per_chip_hour": "1.89", "gke.prices.queued.source": "quote",
             "gke.prices.queued.as_of": "2026-12-01"}
    queued = preemption_cost(smoke_profile(**{"gke.capacity": "queued", "gke.max_run_hours": "2",
                                              "gke.max_usd_per_run": "40", **price}))
    assert (queued.restart_billed_min, queued.restart_unbilled_min) == (30.0, 10.0)
