"""What the run form shows (every parameter described, the shipped profiles as choices) and
the stage timeouts derived from each profile's budgets (flows/core/budgets.py)."""

from __future__ import annotations

import pytest
from prefect.utilities.callables import parameter_schema

from flows.announcements.dispatch import dispatch_announcement
from flows.backends import backend_for
from flows.config import Profile, load_profile, profile_names
from flows.core.budgets import SLACK_S, budgets_for
from flows.operations.teardown import teardown_flow
from flows.pipeline import rl_post_training
from flows.stages import STAGE_BY_NAME
from tests.support.profiles import TUTORIAL_REQUIRED, required_overrides


def stage_timeout_s(profile: Profile, stage: str) -> float:
    """As the flow asks it: of the run's backend."""
    return backend_for(profile).stage_timeout_s(stage)


@pytest.mark.parametrize("flow", [rl_post_training, teardown_flow, dispatch_announcement])
def test_every_parameter_is_described_on_the_run_form(flow):
    properties = parameter_schema(flow).model_dump()["properties"]
    assert properties and all(p.get("description") for p in properties.values()), properties


def test_the_profile_is_a_choice_of_the_shipped_ones():
    profile = parameter_schema(rl_post_training).model_dump()["properties"]["profile"]
    assert profile["enum"] == profile_names() and profile["type"] == "string"


def test_the_teardown_form_offers_only_profiles_with_a_cluster():
    """The rehearsal has none: offered, it ended in an AssertionError on the run page."""
    profile = parameter_schema(teardown_flow).model_dump()["properties"]["profile"]
    gke = [name for name in profile_names() if load_profile(
        name, required_overrides(name)).gke is not None]
    assert profile["enum"] == gke and "rehearsal" not in gke and profile["type"] == "string"


def test_the_announcement_parameter_says_who_sets_it():
    text = parameter_schema(rl_post_training).model_dump()["properties"]["announcement"]
    assert "Leave empty" in text["description"] and "dispatcher" in text["description"]


def _profiles():
    return [load_profile(name, required_overrides(name)) for name in profile_names()]


@pytest.mark.parametrize("profile", _profiles(), ids=profile_names())
def test_each_stage_may_run_longer_than_its_own_watch_allows_and_no_longer(profile):
    for stage in STAGE_BY_NAME:
        bound = stage_timeout_s(profile, stage)
        if profile.gke is not None and stage in ("convert", "train", "export"):
            b = budgets_for(profile, stage)
            assert bound == (b.queue_s + b.run_s) * (b.preemptions + 1) + SLACK_S
        elif profile.local is not None:
            assert bound > profile.local.step_timeout_s
        assert 0 < bound < 30 * 24 * 3600


def test_the_profile_budgets_move_the_bounds():
    base = load_profile("qwen3-30b-a3b-v6e-32", dict(TUTORIAL_REQUIRED))
    tight = load_profile("qwen3-30b-a3b-v6e-32", {**TUTORIAL_REQUIRED, "gke.queue_budget_s": "600",
                                                  "gke.train_run_budget_s": "3600",
                                                  "gke.preemption_budget": "0"})
    assert stage_timeout_s(tight, "train") == 600 + 3600 + SLACK_S
    assert stage_timeout_s(tight, "train") < stage_timeout_s(base, "train")
