"""Each capacity mode's blueprint: the declared edits of the tutorial's example, expanded the way
gcluster expands it (tests/fakes/cloud/gcluster_expand.py) and checked against what Cluster
Toolkit's node pool module would refuse (tests/fakes/cloud/node_pool_rules.py)."""

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
from flows.config.capacity import CAPACITY_MODES
from tests.fakes.cloud import BLUEPRINT_FIXTURE
from tests.fakes.cloud.gcluster_expand import expand, node_pool
from tests.fakes.cloud.node_pool_rules import precondition_failures
from tests.support.profiles import capacity_profile as mode_profile

FROM_ZERO = [m for m in CAPACITY_MODES if m != "reservation"]


def edited(mode: str) -> dict:
    profile = mode_profile(mode)
    assert profile.gke is not None
    text = edit_blueprint(BLUEPRINT_FIXTURE.read_text(), edit_context(profile.gke))
    return YAML(typ="safe").load(text)


def pool(doc: dict) -> dict:
    return find_module(doc, "gke-tpu-v6e-pool")["settings"]


DEPLOY_VARS = {"tpu_topology": "4x8", "num_slices": "1", "zone": "us-east5-b",
               "reservation": "my-v6e-res"}


def expanded_pool(mode: str) -> dict:
    """The TPU pool module's settings after gcluster's expansion (hardware.go)."""
    doc = edited(mode)
    return expand(pool(doc), {**doc["vars"], **DEPLOY_VARS})


@pytest.mark.parametrize("mode", CAPACITY_MODES)
def test_every_mode_passes_the_node_pool_preconditions(mode: str) -> None:
    assert precondition_failures(expanded_pool(mode)) == []


def test_the_fixture_has_the_upstream_examples_pool_without_a_static_count() -> None:
    """Since GoogleCloudPlatform/cluster-toolkit#5557 the example's TPU pool has no static_node_count and no
    autoscaling settings; gcluster fills the count in from the topology."""
    settings = pool(YAML(typ="safe").load(BLUEPRINT_FIXTURE.read_text()))
    assert not {"static_node_count", "autoscaling_min_node_count", "autoscaling_max_node_count",
                "spot", "enable_flex_start"} & set(settings)
    assert settings["placement_policy"]["tpu_topology"] == "$(vars.tpu_topology)"


def test_reservation_mode_keeps_the_tutorials_static_pool() -> None:
    settings = pool(edited("reservation"))
    assert settings["reservation_affinity"]["consume_reservation_type"] == "SPECIFIC_RESERVATION"
    assert "static_node_count" not in settings  # the example's: gcluster fills it in
    live = node_pool(expanded_pool("reservation"), "p")
    assert live["initialNodeCount"] == 8 and "autoscaling" not in live


@pytest.mark.parametrize("mode", FROM_ZERO)
def test_modes_without_reservation_scale_one_slice_up_from_zero(mode: str) -> None:
    doc = edited(mode)
    settings = pool(doc)
    assert settings["reservation_affinity"] == {"consume_reservation_type": "NO_RESERVATION"}
    assert settings["static_node_count"] is None  # present and null: gcluster leaves it
    assert (settings["autoscaling_min_node_count"], settings["autoscaling_max_node_count"]) == (0, 8)
    assert settings.get("spot", False) is (mode == "spot")
    assert settings.get("enable_flex_start", False) is (mode in ("flex-start", "queued"))
    assert settings.get("enable_queued_provisioning", False) is (mode == "queued")
    quota = find_module(doc, "workload-manager-install")["settings"]["kueue"][
        "config_template_vars"]["tpu_quota"]
    assert quota == "$(vars.num_slices * 8 * gke-tpu-v6e-pool.tpu_chips_per_node)"
    assert "vars.reservation" not in str(doc["deployment_groups"])


@pytest.mark.parametrize("mode", FROM_ZERO)
def test_after_gclusters_expansion_the_pool_autoscales_from_zero(mode: str) -> None:
    """With the example's pool (no static_node_count) a `remove` of the key changes nothing:
    gcluster fills in 8 and the module builds a static, always-billed pool. The edits' explicit
    null survives the expansion, so the pool autoscales from zero."""
    live = node_pool(expanded_pool(mode), "p")
    assert "initialNodeCount" not in live
    assert live["autoscaling"] == {"enabled": True, "locationPolicy": "ANY",
                                   "minNodeCount": 0, "maxNodeCount": 8}
    assert live["config"]["reservationAffinity"] == {"consumeReservationType": "NO_RESERVATION"}
    assert live["config"].get("spot", False) is (mode == "spot")
    assert live["config"].get("flexStart", False) is (mode in ("flex-start", "queued"))
    assert ("queuedProvisioning" in live) is (mode == "queued")
    assert live["config"]["labels"]["tpurl/capacity"] == mode


def test_flex_start_turns_auto_repair_off_and_bounds_the_nodes_life() -> None:
    settings = pool(edited("flex-start"))
    assert settings["auto_repair"] is False
    assert settings["max_run_duration"] == 12 * 3600


def test_queued_provisioning_leaves_the_lifetime_to_the_provisioning_request() -> None:
    """The toolkit's queued example: enable_flex_start and enable_queued_provisioning, auto
    repair off, no max_run_duration (maxRunDurationSeconds is Kueue's ProvisioningRequest
    parameter, kueue_objects.py)."""
    settings = pool(edited("queued"))
    assert settings["auto_repair"] is False and "max_run_duration" not in settings
    assert precondition_failures(dict(expanded_pool("queued"), spot=True)) == [
        "Both enable_flex_start and spot consumption option cannot be set to true at the "
        "same time.", "Both enable_queued_provisioning and spot consumption option cannot be "
        "set to true at the same time."]


def test_the_rules_catch_an_unedited_pool_in_spot_or_flex_mode() -> None:
    """The fake refuses what the module refuses: spot on the example's reservation pool."""
    settings = dict(expanded_pool("reservation"), spot=True)
    assert precondition_failures(settings) == [
        "Spot consumption option only works with reservation_affinity consume_reservation_type "
        "NO_RESERVATION."]
    flex = dict(expanded_pool("reservation"), enable_flex_start=True)
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
    from flows.core.failures import StageFailed

    edit = BlueprintEdit("x", module="gke-tpu-v6e-pool", setting="kueue.nope.deeper", set=1)
    with pytest.raises(StageFailed, match=r"has no setting 'kueue\.nope\.deeper'"):
        edit_blueprint(BLUEPRINT_FIXTURE.read_text(), EditContext("project-storage-admin"),
                       [edit])


def test_a_remove_of_a_missing_setting_is_an_error_naming_the_edit() -> None:
    from flows.backends.gke.infra.blueprint import BlueprintEdit
    from flows.core.failures import StageFailed

    edit = BlueprintEdit("capacity-not-static", module="gke-tpu-v6e-pool",
                         setting="static_node_count", remove=True)
    with pytest.raises(StageFailed, match=r"edit capacity-not-static removes "
                       r"gke-tpu-v6e-pool\.static_node_count, which the blueprint does not have"):
        edit_blueprint(BLUEPRINT_FIXTURE.read_text(), EditContext("project-storage-admin"),
                       [edit])


def test_a_replace_that_finds_nothing_is_an_error_naming_the_edit() -> None:
    from flows.backends.gke.infra.blueprint import BlueprintEdit
    from flows.core.failures import StageFailed

    edit = BlueprintEdit("sa-edit", module="node_pool_service_account", setting="project_roles",
                         add="storage.admin", replaces="storage.legacyReader")
    with pytest.raises(StageFailed, match=r"edit sa-edit replaces 'storage\.legacyReader'"):
        edit_blueprint(BLUEPRINT_FIXTURE.read_text(), EditContext("project-storage-admin"),
                       [edit])


@pytest.mark.parametrize("mode", CAPACITY_MODES)
@pytest.mark.parametrize("slices", [1, 2])
def test_kueue_tpu_quota_as_terraform_renders_it(mode: str, slices: int) -> None:
    """The quota the fake gcluster renders comes from the blueprint's expression: every chip
    of every slice in each mode, and 0 (nothing admitted) for an autoscaled pool whose quota
    edit is missing, as gke-node-pool's node_count_static would make it."""
    from flows.backends.gke.infra.blueprint import load_edits
    from tests.fakes.cloud.gcluster_expand import tpu_quota

    profile = mode_profile(mode)
    assert profile.gke is not None
    variables = {**DEPLOY_VARS, "num_slices": str(slices)}

    def quota(drop: str = "") -> int:
        edits = [e for e in load_edits() if e.id != drop]
        doc = YAML(typ="safe").load(edit_blueprint(BLUEPRINT_FIXTURE.read_text(),
                                                   edit_context(profile.gke), edits))
        expression = find_module(doc, "workload-manager-install")["settings"]["kueue"][
            "config_template_vars"]["tpu_quota"]
        pools = {"gke-tpu-v6e-pool": expand(pool(doc), {**doc["vars"], **variables})}
        return tpu_quota(expression, {**doc["vars"], **variables}, pools)

    assert quota() == 32 * slices
    if mode != "reservation":
        assert quota(drop="capacity-kueue-quota") == 0


def test_the_rules_refuse_total_and_zonal_counts_together_and_compact_across_zones() -> None:
    """gke-node-pool variables.tf: the per-zone autoscaling counts the edits set exclude the
    total ones; main.tf: COMPACT placement needs exactly one zone (the example's zones)."""
    settings = dict(expanded_pool("on-demand"), autoscaling_total_max_nodes=8)
    assert precondition_failures(settings) == [
        "autoscaling_total_max_nodes (global) is mutually exclusive with "
        "autoscaling_max_node_count (zonal). Please unset one of them."]
    assert precondition_failures(dict(expanded_pool("spot"), zones=None)) == [
        "Compact placement is only available for node pools operating in a single zone."]
