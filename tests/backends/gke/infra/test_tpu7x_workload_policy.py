"""A multi-host Ironwood (tpu7x) pool: the edited blueprint adds Cluster Toolkit's
resource-policy module with a HIGH_THROUGHPUT workload policy of the slice's topology and has
the TPU pool use it instead of setting tpu_topology, as the toolkit's
examples/gke-tpu-7x/gke-tpu-7x-advanced.yaml does. The fake gcluster takes it as the toolkit
does (tests/fakes/cloud/resource_policy.py: the module's variables, the ``use`` and the
static node count gcluster reads from the policy), and refuses what the toolkit refuses."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from flows.backends.gke.infra import clients
from flows.backends.gke.infra.blueprint import edit_blueprint, edit_context, find_module
from flows.backends.gke.infra.cluster import pool_mismatches
from flows.backends.gke.infra.commands import blueprint_vars
from flows.backends.gke.infra.infra_stage import run_gke
from flows.backends.gke.infra.pool_shape import pool_shape_problems
from flows.backends.gke.infra.settings import settings_from_profile
from flows.config.profile import Profile
from tests.fakes.cloud import BLUEPRINT_FIXTURE, Cloud
from tests.fakes.cloud import resource_policy as fake_policy
from tests.fakes.cloud.gcluster_expand import deployed_pools
from tests.fakes.cloud.node_pool_rules import precondition_failures
from tests.support.logs import Log
from tests.support.profiles import capacity_profile

POOL = "gke-tpu-v6e-pool"
QUOTE = {"usd_per_chip_hour": "3.0", "source": "a quote", "as_of": "2026-12-01"}
# the tutorial's mesh on a smaller slice: its 4 expert shards need 8 trainer devices
SMALL_MESH = {"train.args.ici_expert_parallelism": "1"}


def ironwood(topology: str, mode: str = "reservation") -> Profile:
    """The infra tests' tutorial profile on tpu7x ``topology`` in capacity ``mode``."""
    return capacity_profile(mode, **{"gke.machine_type": "tpu7x-standard-4t",
                                     "gke.topology": topology, **SMALL_MESH,
                                     **{f"gke.prices.{mode}.{k}": v for k, v in QUOTE.items()}})


def rendered(profile: Profile) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the edited blueprint, its vars with the deploy's)."""
    assert profile.gke is not None
    doc = YAML(typ="safe").load(edit_blueprint(BLUEPRINT_FIXTURE.read_text(),
                                               edit_context(profile.gke)))
    return doc, {**doc["vars"], **blueprint_vars(settings_from_profile(profile))}


@pytest.mark.parametrize("mode", ["reservation", "on-demand", "flex-start"])
def test_a_multi_host_slice_uses_a_workload_policy_of_its_topology(mode: str) -> None:
    profile = ironwood("2x2x4", mode)
    doc, variables = rendered(profile)
    policy = find_module(doc, "workload_policy")
    assert policy["source"] == "modules/compute/resource-policy"
    assert policy["settings"]["workload_policy"] == {
        "accelerator_topology": "$(vars.tpu_topology)", "type": "HIGH_THROUGHPUT"}
    pool = find_module(doc, POOL)
    assert "workload_policy" in pool["use"] and "placement_policy" not in pool["settings"]
    ids = [m["id"] for g in doc["deployment_groups"] for m in g["modules"]]
    assert ids.index("workload_policy") < ids.index(POOL)  # defined before its user
    pools, refused = deployed_pools(doc, variables)
    assert refused == []
    settings = pools[POOL]
    assert precondition_failures(settings) == []
    assert settings["placement_policy"] == {"type": "COMPACT",
                                            "name": f"tpu7x-workload-policy-{fake_policy.SUFFIX}",
                                            "tpu_topology": "2x2x4"}
    # gcluster counts the hosts from the policy's topology (hardware.go): 16 chips / 4
    assert settings.get("static_node_count") == (4 if mode == "reservation" else None)
    assert profile.gke is not None
    assert pool_shape_problems(edit_blueprint(BLUEPRINT_FIXTURE.read_text(),
                                              edit_context(profile.gke)),
                               profile.gke, blueprint_vars(settings_from_profile(profile))) == []


@pytest.mark.parametrize(("machine_type", "topology"), [("tpu7x-standard-4t", "2x2x1"),
                                                         ("ct5p-hightpu-4t", "2x2x2"),
                                                         ("ct6e-standard-4t", "4x8")])
def test_other_slices_keep_the_examples_tpu_topology(machine_type: str, topology: str) -> None:
    profile = capacity_profile("reservation", **{
        "gke.machine_type": machine_type, "gke.topology": topology, **SMALL_MESH,
        **({} if machine_type.startswith("ct6e") else {
            f"gke.prices.reservation.{k}": v for k, v in QUOTE.items()})})
    doc, variables = rendered(profile)
    ids = [m["id"] for g in doc["deployment_groups"] for m in g["modules"]]
    assert "workload_policy" not in ids
    pool = find_module(doc, POOL)
    assert pool["settings"]["placement_policy"]["tpu_topology"] == "$(vars.tpu_topology)"
    pools, refused = deployed_pools(doc, variables)
    assert refused == [] and pools[POOL]["machine_type"] == machine_type


def _broken(change: Any) -> list[str]:
    doc, variables = rendered(ironwood("2x2x2"))
    changed = copy.deepcopy(doc)
    change(changed)
    return deployed_pools(changed, variables)[1]


def test_the_fake_refuses_what_the_toolkit_refuses() -> None:
    """resource-policy's variables.tf (unknown setting, name validation, the object's
    attributes), main.tf's precondition, and gcluster's check of a ``use``."""
    def unknown_setting(doc: Any) -> None:
        find_module(doc, "workload_policy")["settings"]["zone"] = "us-east5-b"

    def bad_name(doc: Any) -> None:
        find_module(doc, "workload_policy")["settings"]["name"] = "tpu7x_workload_policy"

    def mode_without_type(doc: Any) -> None:
        find_module(doc, "workload_policy")["settings"]["workload_policy"] = {
            "accelerator_topology_mode": "PROVISION_ONLY"}

    def unknown_attribute(doc: Any) -> None:
        find_module(doc, "workload_policy")["settings"]["workload_policy"]["topology"] = "x"

    def missing_module(doc: Any) -> None:
        find_module(doc, POOL)["use"].append("no-such-policy")

    assert _broken(unknown_setting) == [
        "workload_policy.zone: a setting was added that is not found in the module"]
    assert "must be between 1 and 54 characters" in _broken(bad_name)[0]
    assert _broken(mode_without_type) == [
        "Both workload_policy.type and workload_policy.accelerator_topology must be set when "
        "accelerator_topology_mode is specified."]
    assert _broken(unknown_attribute) == [
        "workload_policy.workload_policy.topology: attribute not in the object type"]
    assert _broken(missing_module) == [f"{POOL}.use: 'no-such-policy': module not found"]


def test_without_the_policy_edits_pre_flight_names_the_pool(monkeypatch: pytest.MonkeyPatch
                                                              ) -> None:
    from flows.backends.gke.infra import blueprint

    profile = ironwood("2x2x2")
    assert profile.gke is not None
    edits = [e for e in blueprint.load_edits() if not e.id.startswith("tpu7x-")]
    text = edit_blueprint(BLUEPRINT_FIXTURE.read_text(), edit_context(profile.gke), edits)
    (setting, problem, fix), = pool_shape_problems(
        text, profile.gke, blueprint_vars(settings_from_profile(profile)))
    assert setting == f"{POOL}.placement_policy"
    assert "HIGH_THROUGHPUT workload policy of accelerator_topology 2x2x2" in problem
    assert "tpu7x-workload-policy" in fix


def test_a_deploy_builds_the_ironwood_pool_with_its_policy(
        tmp_path: Path, cloud: Cloud, gcs: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the fake gcluster: the pool GKE reports has the machine type, the policy and
    the topology, and Kueue's TPU flavor the tpu7x label (the deploy's accelerator_type)."""
    monkeypatch.setattr(clients, "default_clients", lambda s: (cloud.apis, gcs))
    monkeypatch.setenv("TPURL_CACHE_DIR", str(tmp_path / "cache"))
    profile = ironwood("2x2x2", "on-demand")
    s = settings_from_profile(profile)
    # a project whose Compute Engine API lists the machine type in the profile's zone
    cloud.apis.machine_type_zones["tpu7x-standard-4t"] = {s.gke.zone}
    assert run_gke(profile, Log()).deployed
    live = cloud.apis.get_cluster(s.gke.project, s.gke.region, s.gke.cluster)
    assert pool_mismatches(live, s) == []
    (pool,) = [p for p in live["nodePools"] if p["name"] != "cpu-np"]
    assert pool["config"]["machineType"] == "tpu7x-standard-4t"
    assert pool["placementPolicy"] == {
        "type": "COMPACT", "tpuTopology": "2x2x2",
        "policyName": f"tpu7x-workload-policy-{fake_policy.SUFFIX}"}
    assert pool["autoscaling"]["maxNodeCount"] == 2
    assert "cloud.google.com/gke-tpu-accelerator: tpu7x" in cloud.state()["kueue_config"]
