"""Each capacity mode's blueprint: the declared edits of the tutorial's example, checked against
what Cluster Toolkit's node pool module would refuse (tests/fakes/cloud/node_pool_rules.py)."""

from __future__ import annotations

import pytest
from ruamel.yaml import YAML

from flows.backends.gke.infra.blueprint import (
    EditContext,
    edit_blueprint,
    edit_context,
    find_module,
)
from flows.backends.gke.infra.commands import blueprint_vars
from flows.backends.gke.infra.settings import settings_from_profile
from tests.fakes.cloud import BLUEPRINT_FIXTURE
from tests.fakes.cloud.node_pool_rules import precondition_failures
from tests.support.profiles import infra_profile

PRICE = {"usd_per_chip_hour": "1.0", "source": "a quote", "as_of": "2026-12-01"}


def mode_profile(mode: str):
    extra: dict[str, str] = {"gke.capacity": mode}
    if mode != "reservation":
        extra["gke.reservation"] = ""
        extra.update({f"gke.prices.{mode}.{k}": v for k, v in PRICE.items()})
    if mode == "flex-start":
        extra["gke.max_run_hours"] = "12"
    return infra_profile(**extra)


def edited(mode: str) -> dict:
    profile = mode_profile(mode)
    assert profile.gke is not None
    text = edit_blueprint(BLUEPRINT_FIXTURE.read_text(), edit_context(profile.gke))
    return YAML(typ="safe").load(text)


def pool(doc: dict) -> dict:
    return find_module(doc, "gke-tpu-v6e-pool")["settings"]


@pytest.mark.parametrize("mode", ["reservation", "on-demand", "spot", "flex-start"])
def test_every_mode_passes_the_node_pool_preconditions(mode: str) -> None:
    assert precondition_failures(pool(edited(mode))) == []


def test_reservation_mode_keeps_the_tutorials_static_pool() -> None:
    settings = pool(edited("reservation"))
    assert settings["reservation_affinity"]["consume_reservation_type"] == "SPECIFIC_RESERVATION"
    assert settings["static_node_count"] == 8
    assert "autoscaling_min_node_count" not in settings


@pytest.mark.parametrize("mode", ["on-demand", "spot", "flex-start"])
def test_modes_without_reservation_scale_one_slice_up_from_zero(mode: str) -> None:
    doc = edited(mode)
    settings = pool(doc)
    assert settings["reservation_affinity"] == {"consume_reservation_type": "NO_RESERVATION"}
    assert "static_node_count" not in settings
    assert (settings["autoscaling_min_node_count"], settings["autoscaling_max_node_count"]) == (0, 8)
    assert settings.get("spot", False) is (mode == "spot")
    assert settings.get("enable_flex_start", False) is (mode == "flex-start")
    quota = find_module(doc, "workload-manager-install")["settings"]["kueue"][
        "config_template_vars"]["tpu_quota"]
    assert quota == "$(vars.num_slices * 8 * gke-tpu-v6e-pool.tpu_chips_per_node)"
    assert "vars.reservation" not in str(doc["deployment_groups"])


def test_flex_start_turns_auto_repair_off_and_bounds_the_nodes_life() -> None:
    settings = pool(edited("flex-start"))
    assert settings["auto_repair"] is False
    assert settings["max_run_duration"] == 12 * 3600


def test_the_rules_catch_an_unedited_pool_in_spot_or_flex_mode() -> None:
    """The fake refuses what the module refuses: spot on the example's reservation pool."""
    settings = dict(pool(edited("reservation")), spot=True)
    assert precondition_failures(settings) == [
        "Spot consumption option only works with reservation_affinity consume_reservation_type "
        "NO_RESERVATION."]
    flex = dict(pool(edited("reservation")), enable_flex_start=True)
    assert "enable_flex_start needs node auto_repair set to false." in precondition_failures(flex)


def test_edits_are_idempotent() -> None:
    profile = mode_profile("flex-start")
    assert profile.gke is not None
    once = edit_blueprint(BLUEPRINT_FIXTURE.read_text(), edit_context(profile.gke))
    assert edit_blueprint(once, edit_context(profile.gke)) == once


def test_deploy_passes_the_reservation_only_in_reservation_mode() -> None:
    assert "reservation" in blueprint_vars(settings_from_profile(mode_profile("reservation")))
    assert "reservation" not in blueprint_vars(settings_from_profile(mode_profile("spot")))


def test_a_setting_edit_on_a_missing_module_fails_loudly() -> None:
    from flows.backends.gke.infra.blueprint import BlueprintEdit
    from flows.backends.gke.infra.errors import InfraFailed

    edit = BlueprintEdit("x", module="gke-tpu-v6e-pool", setting="kueue.nope.deeper", set=1)
    with pytest.raises(InfraFailed, match=r"has no setting 'kueue\.nope\.deeper'"):
        edit_blueprint(BLUEPRINT_FIXTURE.read_text(), EditContext("project-storage-admin"),
                       [edit])
