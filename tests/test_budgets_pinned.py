"""The time budgets of the shipped smoke and tutorial profiles (and the rehearsal), pinned
as numbers: each stage's task timeout, the run's bound, each GKE stage's watch budgets, the
plan's worst-case waits and each capacity mode's wait. Moving where the budgets are computed
must not move a single one of them."""

from __future__ import annotations

import dataclasses

import pytest

from flows.backends import backend_for
from flows.backends.gke.jobs.manifests import jobs_of
from flows.config import Profile, load_profile
from flows.core.budgets import budgets_for, mode_budget_h, run_bound_s, stage_waits
from flows.core.retry import RETRY_DELAYS_S
from flows.stages import stages_for
from tests.support.profiles import TUTORIAL, required_overrides

SMOKE = "smoke-qwen3-0.6b-v6e-8"
H = 3600.0


def _profile(name: str, **extra: str) -> Profile:
    return load_profile(name, {**required_overrides(name), **extra}, environ={})


# (profile, overrides) → (each stage's task timeout, the run's bound)
BOUNDS = {
    (SMOKE, ()): ({"image": 4 * H, "infra": 4 * H, "convert": 354600.0, "train": 16200.0,
                   "export": 354600.0}, 2262950.0),
    (TUTORIAL, ()): ({"image": 4 * H, "infra": 4 * H, "convert": 433800.0,
                      "train": 433800.0, "export": 433800.0}, 3990950.0),
    (TUTORIAL, (("eval.batches", "2"),)): ({"image": 4 * H, "infra": 4 * H,
                                             "convert": 433800.0, "train": 433800.0,
                                             "export": 433800.0, "evaluate": 865800.0},
                                            6588420.0),
    ("rehearsal", ()): ({stage: 9000.0 for stage in ("image", "infra", "convert", "train",
                                                      "export", "evaluate")}, 162420.0),
}


@pytest.mark.parametrize(("name", "extra"), list(BOUNDS), ids=lambda v: str(v))
def test_each_stage_timeout_and_the_run_bound_are_unchanged(
        name: str, extra: tuple[tuple[str, str], ...]) -> None:
    profile = _profile(name, **dict(extra))
    stages, run = BOUNDS[(name, extra)]
    names = [stage.name for stage in stages_for(profile)]
    backend = backend_for(profile)  # as the flow asks: the run's one backend
    assert {stage: backend.stage_timeout_s(stage) for stage in names} == stages
    assert run_bound_s(profile, [backend.stage_timeout_s(stage) for stage in names]) == run


DEFAULTS = {"queue_s": 6 * H, "run_s": 24 * H, "schedule_s": 1800.0,
            "waits_for_capacity": False, "preemptions": 3, "api_s": 900.0,
            "pull_grace_s": 600.0, "tick_s": 1.0, "log_drain_s": 10.0, "delete_wait_s": 300.0,
            "iam_propagation_s": 420.0}
# (profile, stage) → the watch budgets that differ from DEFAULTS, the plan's give-up time
# and JobSets at most
WATCH = {
    (SMOKE, "convert"): ({"queue_s": 1800.0}, 10870.0, 4),
    (SMOKE, "train"): ({"queue_s": 1800.0, "run_s": 1800.0}, 10870.0, 4),
    (SMOKE, "export"): ({"queue_s": 1800.0}, 10870.0, 4),
    (SMOKE, "evaluate"): ({"queue_s": 1800.0}, 10870.0, 8),
    (TUTORIAL, "convert"): ({}, 70270.0, 4),
    (TUTORIAL, "train"): ({}, 70270.0, 4),
    (TUTORIAL, "export"): ({}, 70270.0, 4),
    (TUTORIAL, "evaluate"): ({}, 70270.0, 8),
}


@pytest.mark.parametrize(("name", "stage"), list(WATCH), ids=lambda v: str(v))
def test_each_gke_stages_watch_budgets_and_worst_wait_are_unchanged(name: str,
                                                                     stage: str) -> None:
    differs, give_up_s, jobsets = WATCH[(name, stage)]
    budgets = budgets_for(_profile(name), stage)
    assert dataclasses.asdict(budgets) == {**DEFAULTS, **differs}
    waits = stage_waits(stage, budgets, RETRY_DELAYS_S, len(jobs_of(stage)))
    assert (waits.give_up_after_s, waits.jobsets) == (give_up_s, jobsets)


def test_flex_start_waits_for_the_slice_under_the_queue_budget() -> None:
    profile = _profile(TUTORIAL, **{"gke.capacity": "flex-start", "gke.reservation": "",
                                    "gke.max_run_hours": "5",
                                    **{f"gke.prices.flex-start.{k}": v for k, v in {
                                        "usd_per_chip_hour": "1.0", "source": "a quote",
                                        "as_of": "2026-12-01"}.items()}})
    train, convert = budgets_for(profile, "train"), budgets_for(profile, "convert")
    assert (train.waits_for_capacity, convert.waits_for_capacity) == (True, False)
    assert stage_waits("train", train, RETRY_DELAYS_S).give_up_after_s == 2 * 6 * H


@pytest.mark.parametrize(("name", "budgets_h"), [
    (SMOKE, {"reservation": 0.0, "on-demand": 0.5, "spot": 0.5, "flex-start": 0.5,
             "queued": 0.5}),
    (TUTORIAL, {"reservation": 0.0, "on-demand": 0.5, "spot": 0.5, "flex-start": 6.0,
                "queued": 6.0}),
])
def test_each_capacity_modes_wait_is_unchanged(name: str, budgets_h: dict[str, float]) -> None:
    profile = _profile(name)
    assert {mode: mode_budget_h(profile, mode) for mode in budgets_h} == budgets_h
