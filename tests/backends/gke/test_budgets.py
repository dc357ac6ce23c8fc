"""Every watch budget is a validated profile field, and the plan says how long each stage
can wait, Prefect's retries included (a stockout costs the queue budget per attempt: 30 min
is about 90 with two retries, so a profile must be able to set it)."""

from __future__ import annotations

import dataclasses

import pytest

from flows.backends.gke.backend import GkeBackend
from flows.backends.gke.jobs.manifests import GKE_STAGES, jobs_of
from flows.config.errors import ProfileError
from flows.config.watch_budgets import WEEK_S
from flows.core.budgets import Budgets, budgets_for, stage_waits
from tests.support.profiles import tutorial_profile

# Budgets field → the profile field that sets it (tick_s is the check period, not a budget;
# waits_for_capacity follows gke.capacity)
FIELDS = {"queue_s": "queue_budget_s", "run_s": "run_budget_s",
          "schedule_s": "schedule_budget_s", "preemptions": "preemption_budget",
          "api_s": "api_budget_s", "pull_grace_s": "pull_grace_s",
          "log_drain_s": "log_drain_s", "delete_wait_s": "delete_wait_s",
          "iam_propagation_s": "iam_propagation_s"}
PRICE = {"usd_per_chip_hour": "1.0", "source": "a quote", "as_of": "2026-12-01"}
MODES = ["reservation", "on-demand", "spot", "flex-start"]


def test_every_budget_has_a_profile_field_with_the_monitors_default() -> None:
    budgets = {f.name for f in dataclasses.fields(Budgets)}
    assert budgets - {"tick_s", "waits_for_capacity"} == set(FIELDS)
    assert budgets_for(tutorial_profile(), "convert") == Budgets()  # unset: the defaults


@pytest.mark.parametrize(("budget", "field"), sorted(FIELDS.items()))
def test_each_budget_field_sets_the_monitors_budget(budget: str, field: str) -> None:
    value = "7" if field == "preemption_budget" else "77"
    got = getattr(budgets_for(tutorial_profile(**{f"gke.{field}": value}), "train"), budget)
    assert got == float(value)


@pytest.mark.parametrize("field", sorted(set(FIELDS.values()) - {"preemption_budget"}))
@pytest.mark.parametrize("value", ["-1", "nope", str(int(WEEK_S) + 1)])
def test_a_bad_budget_is_refused_naming_the_field(field: str, value: str) -> None:
    if field in ("queue_budget_s", "run_budget_s") and value.isdigit():
        # a queue or a run may legitimately last longer than a week: accepted as set
        assert getattr(tutorial_profile(**{f"gke.{field}": value}).gke, field) == float(value)
        return
    with pytest.raises(ProfileError) as caught:
        tutorial_profile(**{f"gke.{field}": value})
    assert f"gke.{field}" in str(caught.value)


def mode_profile(mode: str, **extra: str):
    settings = {"gke.capacity": mode, **extra}
    if mode != "reservation":
        settings |= {"gke.reservation": "",
                     **{f"gke.prices.{mode}.{k}": v for k, v in PRICE.items()}}
    if mode == "flex-start":
        settings["gke.max_run_hours"] = "5"
    return tutorial_profile(**settings)


@pytest.mark.parametrize("evaluates", [False, True])
@pytest.mark.parametrize("mode", MODES)
def test_the_plan_states_the_worst_case_wait_of_every_stage(mode: str, evaluates: bool) -> None:
    from flows.pipeline import _TASK_OPTIONS, RETRY_DELAYS_S

    assert len(RETRY_DELAYS_S) == _TASK_OPTIONS["retries"]  # the plan counts the real ones
    profile = mode_profile(mode, **{"gke.queue_budget_s": "600",
                                    "gke.schedule_budget_s": "60",
                                    **({"eval.batches": "2"} if evaluates else {})})
    footer = "\n".join(GkeBackend(profile).plan_footer())
    assert ("  evaluate: gives up" in footer) is evaluates
    for stage in GKE_STAGES[:len(GKE_STAGES) - (not evaluates)]:
        jobs = len(jobs_of(stage))
        waits = stage_waits(stage, budgets_for(profile, stage), RETRY_DELAYS_S, jobs)
        assert waits.jobsets == jobs * (budgets_for(profile, stage).preemptions + 1)
        if mode == "flex-start" and stage in ("train", "evaluate"):
            # the slice: waits for capacity under the queue budget, not retried
            assert waits.give_up_after_s == 2 * 600
        else:  # admitted, no node: infrastructure, retried twice, 10 s then 60 s apart
            # (flex-start's convert and export too: the CPU pool is no capacity queue)
            assert waits.give_up_after_s == 3 * (600 + 60) + 70
        assert f"  {stage}: gives up after at most {waits.give_up_after_s / 60:.0f} min" in \
            footer
        assert f"at most {waits.jobsets} JobSet(s)" in footer
