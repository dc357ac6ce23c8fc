"""The capacity chain's decisions (flows/backends/gke/next_action.py) case by case, and the
JobSet each step renders (capacity_run.py): the mode's pools, and with several slices the
zone pinned so every slice comes up in one zone."""

from __future__ import annotations

import logging

import pytest

from flows.backends.gke.capacity_pools import CAPACITY_LABEL, ZONE_LABEL
from flows.backends.gke.capacity_run import CapacityRun, capacity_chain
from flows.backends.gke.fallback import (
    NO_CAPACITY,
    NO_FLEX_CAPACITY,
    NO_QUEUED_CAPACITY,
    Attempt,
    attempts_of,
)
from flows.backends.gke.jobs.options import options_for
from flows.backends.gke.next_action import chain_spent, falls_back
from flows.backends.gke.runtime import GkeRuntime
from flows.backends.gke.watch.served import TPU_ACCELERATOR
from flows.config.gke_section import gke_section
from flows.config.profile import Profile
from flows.core.failures import Diagnosis, FailureCategory
from flows.core.layout import Layout
from flows.core.programs import train_workload
from flows.core.secrets import Redactor
from tests.support.profiles import capacity_overrides, tutorial_profile

CHAIN = ("flex-start", "on-demand", "spot")


def diagnosis(code: str = "", category: FailureCategory = FailureCategory.INFRASTRUCTURE
              ) -> Diagnosis:
    return Diagnosis(category, "no slice", "    detail", "fix", code)


@pytest.mark.parametrize("code", [NO_CAPACITY, NO_FLEX_CAPACITY, NO_QUEUED_CAPACITY])
def test_no_capacity_falls_back_to_the_next_mode_while_the_stage_budget_lasts(code: str) -> None:
    assert falls_back(diagnosis(code), CHAIN, 0, 10.0, 3600.0) == 1
    assert falls_back(diagnosis(code), CHAIN, 1, 10.0, 3600.0) == 2
    assert falls_back(diagnosis(code), CHAIN, 2, 10.0, 3600.0) is None  # the last mode
    assert falls_back(diagnosis(code), CHAIN, 0, 3600.0, 3600.0) is None  # budget spent


@pytest.mark.parametrize("category", list(FailureCategory))
def test_nothing_but_no_capacity_falls_back(category: FailureCategory) -> None:
    assert falls_back(diagnosis("", category), CHAIN, 0, 1.0, 3600.0) is None


def test_the_last_diagnosis_says_what_was_tried() -> None:
    tried = [Attempt("flex-start", waited_s=900, outcome="no-capacity"),
             Attempt("on-demand", waited_s=900, outcome="no-capacity")]
    spent = chain_spent(diagnosis(NO_CAPACITY), CHAIN[:2], tried, 3600.0, 1800.0)
    assert "all 2 modes of gke.capacity were tried" in spent.summary
    assert "flex-start: waited 900 s" in spent.detail and spent.code == NO_CAPACITY
    other = diagnosis("", FailureCategory.USER_ERROR)
    assert chain_spent(other, CHAIN, tried, 3600.0, 1800.0) is other


def test_one_slice_lets_the_autoscaler_pick_the_zone_several_slices_pin_one() -> None:
    zones = ("us-east5-b", "us-east5-a")
    assert attempts_of(("on-demand", "spot"), zones, 1) == (("on-demand", ""), ("spot", ""))
    assert attempts_of(("reservation", "spot"), zones, 2) == (
        ("reservation", ""), ("spot", "us-east5-b"), ("spot", "us-east5-a"))
    assert attempts_of(("spot",), zones[:1], 2) == (("spot", ""),)


def renderer(profile: Profile) -> CapacityRun:
    return CapacityRun(profile, stage="train", options=options_for(profile),
                       redactor=Redactor(), logger=logging.getLogger("tpurl"))


def tpu_selectors(jobset: dict) -> list[dict]:
    found = []
    for rjob in jobset["spec"]["replicatedJobs"]:
        selector = rjob["template"]["spec"]["template"]["spec"].get("nodeSelector") or {}
        if TPU_ACCELERATOR in selector:
            found.append(selector)
    return found


def test_each_step_renders_the_jobset_for_its_mode_and_zone() -> None:
    profile = tutorial_profile(**capacity_overrides("on-demand,spot"),
                               **{"gke.zones": "us-east5-b,us-east5-a", "gke.num_slices": "2"})
    steps = capacity_chain(gke_section(profile))
    assert steps == ("on-demand@us-east5-b", "on-demand@us-east5-a", "spot@us-east5-b",
                     "spot@us-east5-a")
    workload = train_workload(profile, Layout(profile), GkeRuntime(profile))
    renders = renderer(profile)
    for step in steps:
        mode, _, zone = step.partition("@")
        jobset = renders.jobset_for(workload, "train", step)
        selectors = tpu_selectors(jobset)
        assert selectors and all(s[CAPACITY_LABEL] == mode and s[ZONE_LABEL] == zone
                                 for s in selectors), selectors
    one = tutorial_profile(**capacity_overrides("on-demand,spot"),
                           **{"gke.zones": "us-east5-b,us-east5-a"})
    jobset = renderer(one).jobset_for(train_workload(one, Layout(one), GkeRuntime(one)),
                                      "train", "spot")
    assert all(ZONE_LABEL not in s and s[CAPACITY_LABEL] == "spot"
               for s in tpu_selectors(jobset))
