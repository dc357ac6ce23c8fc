"""The spend cap's rules at load (flows/config/spend.py), as pure calls on loaded profiles: which
stages are billed and for how long in each capacity mode, which price a cap must admit, and
which caps the loader refuses, with the figures and the fix a user reads.

The tutorial profile: 32 chips; estimated hours convert 0.5, train 4, export 0.5; reservation
at $2.70/chip-h. A pool from zero adds the autoscaler's 10 min scale-down tail to every stage
that brings TPU nodes up."""

from __future__ import annotations

import pytest

from flows.common.issues import Issue
from flows.config import ProfileError
from flows.config.loading import load_profile
from flows.config.spend import (
    billed_stage_hours,
    estimated_run_usd,
    estimated_stage_usd,
    scale_down_tail_h,
    spend_issues,
    stage_chips_held,
)
from tests.support.profiles import QUOTED_PRICE, capacity_overrides, tutorial_profile

TAIL_H = 20 / 60  # at most: the autoscaler's unneeded time and delay after add, in hours
STAGES = ("convert", "train", "export", "evaluate")


def _from_zero(mode: str = "on-demand", usd: str = "1.0", **extra: str):
    """The tutorial in a mode that scales from zero, at ``usd`` per chip-hour."""
    price = {**QUOTED_PRICE, "usd_per_chip_hour": usd}
    return tutorial_profile(**{**capacity_overrides(mode),
                               **{f"gke.prices.{mode}.{k}": v for k, v in price.items()},
                               **extra})


def _refused(**fields: str) -> list[Issue]:
    with pytest.raises(ProfileError) as caught:
        tutorial_profile(**fields)
    return [i for i in caught.value.issues if i.category == "config/spend-cap"]


# --- what is billed, stage by stage -------------------------------------------------------
def test_a_reservation_bills_the_whole_pool_in_every_stage_and_no_tail() -> None:
    gke = tutorial_profile().gke
    assert gke is not None
    assert [stage_chips_held(gke, s) for s in STAGES] == [32, 32, 32, 32]
    assert [scale_down_tail_h(gke, s) for s in STAGES] == [0.0] * 4  # billed in its wall time


def test_a_chain_with_a_reservation_keeps_its_static_pool() -> None:
    gke = tutorial_profile(**capacity_overrides("reservation,on-demand")).gke
    assert gke is not None and not gke.scales_from_zero
    assert [stage_chips_held(gke, s) for s in STAGES] == [32] * 4
    assert scale_down_tail_h(gke, "train") == 0.0


@pytest.mark.parametrize("mode", ["on-demand", "spot", "flex-start", "queued"])
def test_from_zero_only_the_slices_stages_bill_chips_and_a_scale_down_tail(mode: str) -> None:
    gke = _from_zero(mode).gke
    assert gke is not None
    held = {s: stage_chips_held(gke, s) for s in STAGES}
    assert held == {"convert": 0, "train": 32, "export": 0, "evaluate": 32}  # cpu-pool work
    tails = {s: scale_down_tail_h(gke, s) for s in STAGES}
    assert tails == {"convert": 0.0, "train": pytest.approx(TAIL_H), "export": 0.0,
                     "evaluate": pytest.approx(TAIL_H)}


def test_conversion_on_the_tpu_hosts_is_billed_as_the_slices_work() -> None:
    """On a reservation (the only mode that allows tpu-hosts) every stage holds the pool."""
    gke = tutorial_profile(**{"gke.conversion_placement": "tpu-hosts"}).gke
    assert gke is not None and [stage_chips_held(gke, s) for s in STAGES] == [32] * 4


def test_billed_hours_are_the_estimate_plus_the_tail_where_nodes_came_up() -> None:
    reserved, from_zero = tutorial_profile(), _from_zero()
    assert [billed_stage_hours(reserved, s) for s in ("convert", "train", "export")] == \
        [0.5, 4.0, 0.5]
    assert billed_stage_hours(from_zero, "train") == pytest.approx(4.0 + TAIL_H)
    assert billed_stage_hours(from_zero, "convert") == pytest.approx(0.5)  # no TPU node


# --- what the estimate costs --------------------------------------------------------------
def test_the_tutorials_estimate_is_its_chip_hours_at_the_reservation_price() -> None:
    profile = tutorial_profile()
    assert [estimated_stage_usd(profile, s) for s in ("convert", "train", "export")] == \
        pytest.approx([32 * 0.5 * 2.7, 32 * 4 * 2.7, 32 * 0.5 * 2.7])
    assert estimated_run_usd(profile) == pytest.approx(432.0)


def test_from_zero_the_estimate_is_trainings_chips_and_tail_only() -> None:
    profile = _from_zero(usd="1.0")
    assert estimated_stage_usd(profile, "convert") == 0.0
    assert estimated_stage_usd(profile, "train") == pytest.approx(32 * (4 + TAIL_H) * 1.0)
    assert estimated_run_usd(profile) == pytest.approx(32 * (4 + TAIL_H))


@pytest.mark.parametrize("chain", ["spot,on-demand", "on-demand,spot"])
def test_a_chains_estimate_is_at_its_dearest_mode_in_any_order(chain: str) -> None:
    """spot quoted at $1, on-demand ships at $2.70: a run may be served by either."""
    profile = tutorial_profile(**capacity_overrides(chain))
    assert profile.gke is not None and profile.gke.mode_usd_per_chip_hour("spot") == 1.0
    assert estimated_run_usd(profile) == pytest.approx(32 * (4 + TAIL_H) * 2.7)


def test_evaluation_is_in_the_run_estimate_when_the_profile_evaluates() -> None:
    profile = tutorial_profile(**{"eval.batches": "2", "gke.estimated_hours.evaluate": "1"})
    assert estimated_stage_usd(profile, "evaluate") == pytest.approx(32 * 1 * 2.7)
    assert estimated_run_usd(profile) == pytest.approx(432.0 + 86.4)
    assert estimated_run_usd(tutorial_profile(**{"gke.estimated_hours.evaluate": "1"})) == \
        pytest.approx(432.0)  # no eval section: the stage does not run


# --- which caps are refused ---------------------------------------------------------------
def test_a_profile_without_gke_has_no_spend_rules() -> None:
    rehearsal = load_profile("rehearsal", {}, environ={})
    assert rehearsal.gke is None and spend_issues(rehearsal) == []


def test_a_cap_equal_to_the_estimate_is_accepted_and_a_cent_less_is_not() -> None:
    assert tutorial_profile(**{"gke.max_usd_per_run": "432"}).gke is not None
    (issue,) = _refused(**{"gke.max_usd_per_run": "431.99"})
    assert issue.field == "gke.max_usd_per_run"
    assert issue.problem == ("$431.99 is below the plan's estimate of $432.00 (capacity "
                             "reservation, 32 chips at $2.70/chip-h, gke.estimated_hours): "
                             "every run would be stopped")
    assert issue.fix == ("set gke.max_usd_per_run to at least 432.00, or lower "
                         "gke.estimated_hours if the estimate is wrong")


def test_the_refusal_names_the_dearest_mode_of_a_chain_and_its_price() -> None:
    (issue,) = _refused(**capacity_overrides("spot,on-demand"), **{"gke.max_usd_per_run": "100"})
    assert "(capacity on-demand, 32 chips at $2.70/chip-h" in issue.problem
    assert "$100.00 is below the plan's estimate of $374.40" in issue.problem


def test_large_figures_are_shown_with_thousands_separators() -> None:
    (issue,) = _refused(**{"gke.max_usd_per_run": "1000", "gke.estimated_hours.train": "20"})
    assert issue.problem.startswith("$1,000.00 is below the plan's estimate of $1,814.40")
    assert "at least 1814.40" in issue.fix


def test_the_margin_raises_the_floor_above_the_estimate() -> None:
    """spend_margin 0.2: a cap must stand 20 % above the $432 estimate, so $518.40."""
    margin = {"gke.spend_margin": "0.2"}
    assert tutorial_profile(**margin, **{"gke.max_usd_per_run": "518.40"}).gke is not None
    (issue,) = _refused(**margin, **{"gke.max_usd_per_run": "500"})
    assert issue.field == "gke.max_usd_per_run"
    assert issue.problem == ("$500.00 is less than gke.spend_margin 20% above the plan's "
                             "estimate of $432.00")
    assert issue.fix == "set gke.max_usd_per_run to at least 518.40, or lower gke.spend_margin"
    (at_estimate,) = _refused(**margin, **{"gke.max_usd_per_run": "432"})
    assert "less than gke.spend_margin" in at_estimate.problem  # the estimate is not enough


def test_a_cap_below_the_estimate_is_refused_once_whatever_the_margin() -> None:
    """Below the estimate, with a margin: one refusal, whose figure is the floor the margin
    sets, so that following it is not refused again for the margin."""
    (issue,) = _refused(**{"gke.spend_margin": "0.2", "gke.max_usd_per_run": "400"})
    assert "below the plan's estimate" in issue.problem
    assert "at least 518.40 (the estimate plus gke.spend_margin 20%)" in issue.fix
    assert tutorial_profile(**{"gke.spend_margin": "0.2",
                               "gke.max_usd_per_run": "518.40"}).gke is not None


def test_a_margin_of_zero_is_the_estimate_itself() -> None:
    assert tutorial_profile(**{"gke.spend_margin": "0", "gke.max_usd_per_run": "432"}).gke


def test_a_stage_cap_at_its_estimate_is_accepted_and_below_it_refused() -> None:
    assert tutorial_profile(**{"gke.max_usd_per_stage.train": "345.60"}).gke is not None
    (issue,) = _refused(**{"gke.max_usd_per_stage.train": "345.59"})
    assert issue.field == "gke.max_usd_per_stage.train"
    assert issue.problem == "$345.59 is below the plan's estimate for train of $345.60"
    assert issue.fix == ("set gke.max_usd_per_stage.train to at least 345.60, or lower "
                         "gke.estimated_hours.train")


def test_a_stage_cap_that_is_not_positive_is_refused_as_such_not_as_low() -> None:
    for cap in ("0", "-5"):
        (issue,) = _refused(**{"gke.max_usd_per_stage.convert": cap})
        assert issue.field == "gke.max_usd_per_stage.convert"
        assert issue.problem == f"{float(cap):g} is not positive"
        assert issue.fix == "give a cap in USD above 0, or remove the key"


def test_a_cap_on_evaluation_without_an_eval_section_is_refused_once() -> None:
    (issue,) = _refused(**{"gke.max_usd_per_stage.evaluate": "0"})
    assert issue.field == "gke.max_usd_per_stage.evaluate"
    assert issue.problem == ("caps evaluate, which this profile does not run (it has no eval "
                             "section)")
    assert issue.fix == "remove the key, or add the eval section"
    assert tutorial_profile(**{"eval.batches": "2", "gke.estimated_hours.evaluate": "1",
                               "gke.max_usd_per_stage.evaluate": "86.4"}).gke is not None


def test_every_wrong_stage_cap_is_reported_in_one_go() -> None:
    issues = _refused(**{"gke.max_usd_per_stage.evaluate": "5",
                         "gke.max_usd_per_stage.convert": "1",
                         "gke.max_usd_per_stage.export": "0"})
    assert sorted(i.field for i in issues) == ["gke.max_usd_per_stage.convert",
                                               "gke.max_usd_per_stage.evaluate",
                                               "gke.max_usd_per_stage.export"]


def test_a_from_zero_stage_with_no_tpu_time_takes_any_positive_cap() -> None:
    profile = _from_zero(**{"gke.max_usd_per_stage.convert": "0.01"})
    assert spend_issues(profile) == []
