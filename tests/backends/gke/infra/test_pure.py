"""Pure parts: the exact commands, the blueprint edit, IAM plans, CIDR rules, pool matching."""

from __future__ import annotations

import pytest
from ruamel.yaml import YAML

from flows.backends.gke.infra.blueprint import BlueprintEdit, edit_blueprint, find_module, load_edits
from flows.backends.gke.infra.cluster import pool_mismatches
from flows.backends.gke.infra.commands import deploy_argv, destroy_argv, get_credentials_argv
from flows.backends.gke.infra.iam import desired_bindings, missing_bindings, missing_registries
from flows.backends.gke.infra.settings import InfraSettings, world_open_warning
from flows.config import ProfileError, load_profile
from flows.core.failures import StageFailed
from tests.fakes.cloud import BLUEPRINT_FIXTURE
from tests.support.profiles import INFRA_OVERRIDES, infra_profile, with_gke

NP_ROLES_AFTER_EDIT = ["logging.logWriter", "monitoring.metricWriter", "monitoring.viewer",
                       "stackdriver.resourceMetadata.writer", "storage.admin",
                       "artifactregistry.reader"]


def test_deploy_argv_is_the_tutorials(settings: InfraSettings) -> None:
    assert deploy_argv(settings) == [
        "gcluster", "deploy", "gke-tpu-v6e-advanced.yaml", "--vars",
        "project_id=my-proj-123,deployment_name=tpurl-v6e,region=us-east5,zone=us-east5-b,"
        "num_slices=1,tpu_topology=4x8,authorized_cidr=203.0.113.0/24,reservation=my-v6e-res,"
        "machine_type=ct6e-standard-4t,accelerator_type=tpu-v6e-slice",
        "--download-dependencies", "-l", "IGNORE", "--auto-approve", "-w"]
    assert destroy_argv(settings) == ["gcluster", "destroy", "tpurl-v6e", "--auto-approve",
        "--download-dependencies"]
    assert get_credentials_argv(settings) == [
        "gcloud", "container", "clusters", "get-credentials", "tpurl-v6e", "--region=us-east5",
        "--project=my-proj-123"]


def _np_roles(text: str) -> list[str]:
    return list(find_module(YAML(typ="safe").load(text),
                            "node_pool_service_account")["settings"]["project_roles"])


def test_blueprint_edit_gives_the_node_pool_account_storage_admin() -> None:
    edited = edit_blueprint(BLUEPRINT_FIXTURE.read_text(), "project-storage-admin")
    assert _np_roles(edited) == NP_ROLES_AFTER_EDIT
    assert "# Allows access from authorized public IPs" in edited  # comments survive the round trip
    assert "$(vars.tpu_topology)" in edited
    wl = find_module(YAML(typ="safe").load(edited), "workload_service_account")
    assert "storage.objectViewer" not in wl["settings"]["project_roles"]
    assert edit_blueprint(edited, "project-storage-admin") == edited  # idempotent


def test_blueprint_edit_is_skipped_in_bucket_scoped_mode() -> None:
    edited = edit_blueprint(BLUEPRINT_FIXTURE.read_text(), "bucket-scoped")
    assert "storage.admin" not in _np_roles(edited)


def test_blueprint_edit_fails_when_the_module_is_gone() -> None:
    text = BLUEPRINT_FIXTURE.read_text().replace("id: node_pool_service_account",
                                                 "id: np_sa_renamed")
    with pytest.raises(StageFailed) as err:
        edit_blueprint(text, "project-storage-admin")
    message = str(err.value)
    assert "module 'node_pool_service_account' not found" in message
    assert "np_sa_renamed" in message and "edits.yaml" in message


def test_blueprint_edit_fails_when_the_setting_is_gone() -> None:
    edit = BlueprintEdit("x", "node_pool_service_account", "roles", "storage.admin", None, ())
    with pytest.raises(StageFailed, match="no list setting 'roles'"):
        edit_blueprint(BLUEPRINT_FIXTURE.read_text(), "project-storage-admin", [edit])
    with pytest.raises(StageFailed, match="no deployment_groups"):
        edit_blueprint("vars: {}\n", "project-storage-admin")


def test_shipped_edit_declaration_loads() -> None:
    edit, kueue, label, locations, *rest, chart, objects = load_edits()
    capacity = [e for e in rest if not e.generations]
    assert capacity and all(e.capacity_modes for e in capacity)
    # the generation's own edits: a multi-host Ironwood pool's workload policy
    policy, use = [e for e in rest if e.generations]
    assert policy.generations == use.generations == ("tpu7x",)
    assert policy.multi_host_only and use.multi_host_only
    assert policy.add_module is not None and use.use == policy.add_module["id"]
    assert use.drops == ("placement_policy",)
    # every pool is labelled with its mode; the cluster's zones only when gke.zones is given
    assert (label.setting, label.capacity_modes) == ("kubernetes_labels", ())
    assert locations.zones_only and locations.setting == "system_node_pool_zones"
    assert (edit.module, edit.setting, edit.add) == ("node_pool_service_account",
                                                     "project_roles", "storage.admin")
    assert kueue.var == "kueue_configuration_path" and "ghpc_stage" in kueue.value
    assert kueue.stage == "kueue-configuration.yaml.tftpl"
    # Kueue installed from its chart with tpurl's values, the objects applied after it
    assert chart.add_module is not None and chart.stage == "kueue-helm-values.yaml"
    assert (objects.kueue_manifest, objects.after) == ("tpurl-kueue-objects",
                                                        chart.add_module["id"])


def test_authorized_cidr_is_required_and_world_warns() -> None:
    """Validated once, with the profile: nothing reaches the infra code without a CIDR."""
    without = {k: v for k, v in INFRA_OVERRIDES.items() if k != "gke.authorized_cidr"}
    with pytest.raises(ProfileError) as err:
        load_profile("qwen3-30b-a3b-v6e-32", without, environ={})
    (issue,) = err.value.issues
    assert issue.field == "gke.authorized_cidr" and "required" in issue.problem
    with pytest.raises(ProfileError, match="not a CIDR") as err:
        infra_profile(**{"gke.authorized_cidr": "everyone"})
    assert "curl ifconfig.me" in err.value.issues[0].fix
    for world in ("0.0.0.0/0", "::/0", "10.0.0.0/0"):
        gke = infra_profile(**{"gke.authorized_cidr": world}).gke
        assert gke.open_to_world and "whole internet" in (world_open_warning(gke) or "")
    assert world_open_warning(infra_profile(**{"gke.authorized_cidr": "203.0.113.7/32"}).gke) \
        is None


def test_iam_plans(settings: InfraSettings) -> None:
    wanted = desired_bindings(with_gke(settings, iam_mode="project-storage-admin"))
    assert [(b.scope, b.member, b.role) for b in wanted] == [
        ("project", "serviceAccount:tpurl-v6e-gke-wl-sa@my-proj-123.iam.gserviceaccount.com",
         "roles/storage.admin"),
        ("project", "serviceAccount:tpurl-v6e-gke-np-sa@my-proj-123.iam.gserviceaccount.com",
         "roles/storage.admin")]
    policy = {"bindings": [{"role": "roles/storage.admin", "members": [wanted[0].member]},
                           {"role": "roles/storage.admin", "members": [wanted[1].member],
                            "condition": {"expression": "false"}}]}
    assert missing_bindings(wanted, policy, {}) == [wanted[1]]  # a conditional grant is not one
    scoped = desired_bindings(settings)  # bucket-scoped: the default
    assert {(b.scope, b.resource, b.role) for b in scoped} == {
        ("bucket", "my-tpurl-bucket", "roles/storage.objectAdmin"),
        ("bucket", "my-tpurl-bucket", "roles/storage.legacyBucketReader")}
    assert scoped[0].argv()[:5] == ["gcloud", "storage", "buckets", "add-iam-policy-binding",
                                    "gs://my-tpurl-bucket"]
    assert missing_registries({"credHelpers": {"gcr.io": "gcloud"}},
                              ["gcr.io", "us-east5-docker.pkg.dev"]) == ["us-east5-docker.pkg.dev"]


def _cluster(topology: str = "4x8", nodes: int = 8, reservation: str = "my-v6e-res") -> dict:
    return {"status": "RUNNING", "nodePools": [
        {"name": "cpu-np", "config": {"machineType": "n4-standard-64"}},
        {"name": "tpu", "status": "RUNNING", "initialNodeCount": nodes,
         "config": {"machineType": "ct6e-standard-4t", "labels": {"tpurl/capacity": "reservation"},
                    "reservationAffinity": {"values": [f"projects/p/reservations/{reservation}"]}},
         "placementPolicy": {"tpuTopology": topology}}]}


def test_pool_matching(settings: InfraSettings) -> None:
    assert pool_mismatches(_cluster(), settings) == []
    assert pool_mismatches(_cluster(topology="4x4", nodes=4), settings) == [
        "pool tpu has topology 4x4, profile wants 4x8", "pool tpu has 4 nodes, profile wants 8"]
    assert "consumes reservation other" in pool_mismatches(_cluster(reservation="other"),
                                                           settings)[0]
    assert pool_mismatches({"status": "RUNNING", "nodePools": []}, settings) == [
        "0 ct6e-standard-4t node pool(s), profile wants 1"]


def test_the_kueue_configuration_carries_the_examples_priority_classes() -> None:
    """cluster-toolkit's examples/gke-tpu-v6e/kueue-configuration.yaml.tftpl (since
    GoogleCloudPlatform/cluster-toolkit#5614, v1.91.0; develop c765092f4) creates five
    PriorityClasses, and ours carries them: without them a workload that names one
    (priorityClassName: high, as on the example's cluster) is refused."""
    import yaml

    from flows.backends.gke.infra.kueue_config import KUEUE_TEMPLATE, render_template

    text = render_template(KUEUE_TEMPLATE.read_text(), {
        "tpu_quota": "32", "accelerator_type": "tpu-v6e-slice", "namespace": "default"})
    classes = [d for d in yaml.safe_load_all(text) if d and d["kind"] == "PriorityClass"]
    assert [(d["apiVersion"], d["metadata"]["name"], d["value"], d["globalDefault"],
             d["description"]) for d in classes] == [
        ("scheduling.k8s.io/v1", "very-low", 100, False, "Very Low"),
        ("scheduling.k8s.io/v1", "low", 250, False, "Low"),
        ("scheduling.k8s.io/v1", "medium", 500, False, "Medium"),
        ("scheduling.k8s.io/v1", "high", 750, False, "High"),
        ("scheduling.k8s.io/v1", "very-high", 1000, False, "Very High")]


def test_bucket_scoped_is_the_default_and_the_other_mode_says_what_it_exposes() -> None:
    """The node pool's account gets the pipeline's bucket only unless the profile
    asks for the tutorial's project-wide storage.admin, which the plan spells out."""
    from flows.backends.gke.infra.infra_stage import gke_plan_notes
    from flows.config.gke import GkeSection

    assert GkeSection.model_fields["iam_mode"].default == "bucket-scoped"
    assert infra_profile().gke.iam_mode == "bucket-scoped"  # the tutorial profile too
    assert not [n for n in gke_plan_notes(infra_profile()) if "iam_mode" in n]
    (note,) = [n for n in gke_plan_notes(infra_profile(**{"gke.iam_mode":
                                                          "project-storage-admin"}))
               if "iam_mode" in n]
    assert "every bucket of the project" in note and "Pathways" in note
