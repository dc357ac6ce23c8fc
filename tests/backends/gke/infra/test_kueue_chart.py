"""Kueue installed from its Helm chart with tpurl's values, fair sharing on
(docs/decisions/0041-kueue-from-its-chart-with-fair-sharing.md): the blueprint two teams
deploy holds the chart's install with fairSharing and the teams' weights on their
ClusterQueues, kubectl-apply keeps JobSet and cert-manager and applies the Kueue objects;
the Configuration the chart receives is Kueue's; the fake gcluster refuses what gcluster
refuses of these modules; the plan says who sets fair sharing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from ruamel.yaml import YAML

from flows.backends.gke.infra import cluster_shape
from flows.backends.gke.infra.blueprint import edit_blueprint, edit_context
from flows.backends.gke.infra.kueue_chart import (
    KUEUE_VALUES,
    deploy_sets_fair_sharing,
    deployed_manager_config,
    fair_sharing_on,
)
from flows.backends.gke.infra.settings import InfraSettings
from flows.config.teams import load_teams
from tests.fakes.cloud.helm_modules import (
    DIRECT_HELM_INSTALL,
    KUBECTL_APPLY,
    kueue_manager_config,
    kueue_objects_source,
    module_problems,
)
from tests.support.profiles import SMOKE, TUTORIAL, settings_with_teams

EXAMPLE = Path(__file__).resolve().parents[3] / "fakes" / "cloud" / "gke-tpu-v6e-advanced.yaml"
TWO_TEAMS = (f"teams:\n"
             f"  research: {{usd_per_month: 900, profiles: [{TUTORIAL}], fair_weight: 2}}\n"
             f"  product: {{usd_per_month: 500, profiles: [{SMOKE}]}}\n")
VALUES_STAGED = "./tpurl-kueue-helm-values.yaml"


def _modules(text: str) -> list[dict[str, Any]]:
    doc = YAML(typ="safe").load(text)
    return [m for g in doc["deployment_groups"] for m in g["modules"]]


def _render(s: InfraSettings) -> tuple[list[dict[str, Any]], str]:
    """(the blueprint's modules as the deploy of ``s`` writes them, the Kueue objects it
    stages)."""
    ctx = edit_context(s.gke, s.shape, s.team)
    return _modules(edit_blueprint(EXAMPLE.read_text(), ctx)), dict(ctx.staged)[
        "kueue-configuration.yaml.tftpl"]


@pytest.fixture
def two_teams(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
              ) -> tuple[InfraSettings, InfraSettings]:
    return (settings_with_teams(tmp_path, monkeypatch, TWO_TEAMS, TUTORIAL),
            settings_with_teams(tmp_path, monkeypatch, TWO_TEAMS, SMOKE))


def test_two_teams_blueprint_installs_kueue_with_fair_sharing_and_the_weights(
        two_teams: tuple[InfraSettings, InfraSettings]) -> None:
    """Before, kubectl-apply installed Kueue with the toolkit's values only, and the teams'
    weights acted nowhere. Now the chart's install carries fairSharing, kubectl-apply no
    longer installs Kueue but still JobSet and cert-manager, and applies the objects (with
    the weights) after Kueue's release; gcluster's and Helm's rules (the fake) accept it."""
    research, _product = two_teams
    modules, objects = _render(research)
    by_id = {m["id"]: m for m in modules}
    chart = by_id["kueue-install"]
    assert chart["source"] == DIRECT_HELM_INSTALL and chart["use"] == ["gke-tpu-v6e-cluster"]
    assert chart["settings"]["values_yaml"] == [f'$(ghpc_stage("{VALUES_STAGED}"))']
    apply = by_id["workload-manager-install"]
    assert apply["source"] == KUBECTL_APPLY
    settings = apply["settings"]
    assert settings["kueue"]["install"] is False
    assert settings["jobset"] == {"install": True} and settings["cert_manager"] == {
        "install": True}
    assert settings["gke_cluster_exists"] == '$(kueue-install.release_completion_id != "")'
    assert [m["id"] for m in modules].index("kueue-install") < [
        m["id"] for m in modules].index("workload-manager-install")
    # the Kueue objects: the staged template, with the vars the kueue section gave it
    assert kueue_objects_source(modules) == ("$(vars.kueue_configuration_path)",
                                             settings["kueue"]["config_template_vars"])
    assert module_problems(modules) == []
    config = kueue_manager_config(modules, {VALUES_STAGED: KUEUE_VALUES.read_text()})
    assert fair_sharing_on(config) is True
    weights = {d["metadata"]["name"]: d["spec"].get("fairSharing")
               for d in yaml.safe_load_all(objects) if d and d["kind"] == "ClusterQueue"}
    assert weights["team-research"] == {"weight": "2"}
    assert weights["team-product"] == {"weight": "1"}


def test_team_bs_deploy_keeps_the_kueue_install_and_team_as_queues(
        two_teams: tuple[InfraSettings, InfraSettings]) -> None:
    """Whichever team deploys, Kueue's install and the objects are the same: B's deploy
    neither drops fair sharing nor A's queue."""
    (a_modules, a_objects), (b_modules, b_objects) = map(_render, two_teams)
    pick = ("kueue-install", "workload-manager-install")
    assert [m for m in a_modules if m["id"] in pick] == [m for m in b_modules
                                                         if m["id"] in pick]
    assert a_objects == b_objects and "name: team-research" in b_objects


def test_a_profile_in_no_team_gets_the_same_kueue_install(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    """Fair sharing is on whatever the teams file says (it acts only within a cohort): a
    cluster of a profile in no team has it too, and its base queue's objects are applied."""
    s = settings_with_teams(tmp_path, monkeypatch, "teams: {}\n", TUTORIAL)
    modules, _ = _render(s)
    assert module_problems(modules) == []
    assert kueue_objects_source(modules) is not None
    assert fair_sharing_on(kueue_manager_config(
        modules, {VALUES_STAGED: KUEUE_VALUES.read_text()})) is True


# Kueue v0.17.1's Configuration, as its Go types name the fields (json tags of
# apis/config/v1beta2/configuration_types.go; leaderElection is component-base's
# config/v1alpha1 LeaderElectionConfiguration)
CONFIGURATION_FIELDS: dict[str, Any] = {
    "apiVersion": None, "kind": None, "namespace": None, "manageJobsWithoutQueueName": None,
    "managedJobsNamespaceSelector": None, "internalCertManagement": {
        "enable", "webhookServiceName", "webhookSecretName"},
    "waitForPodsReady": None, "clientConnection": {"qps", "burst"},
    "integrations": {"frameworks", "externalFrameworks", "labelKeysToCopy"},
    "multiKueue": None, "fairSharing": {"preemptionStrategies"},
    "admissionFairSharing": None, "resources": None, "featureGates": None,
    "objectRetentionPolicies": None, "visibilityServer": None,
    "webhook": {"port", "host", "certDir"},
    "leaderElection": {"leaderElect", "leaseDuration", "renewDeadline", "retryPeriod",
                       "resourceLock", "resourceName", "resourceNamespace"},
    "metrics": {"bindAddress", "enableClusterQueueResources", "customLabels",
                "localQueueMetrics"},
    "health": {"healthProbeBindAddress", "readinessEndpointName", "livenessEndpointName"},
    "pprofBindAddress": None, "controller": {"groupKindConcurrency", "cacheSyncTimeout"},
    "tls": None,
}
PREEMPTION_STRATEGIES = {"LessThanOrEqualToFinalShare", "LessThanInitialShare"}


def configuration_problems(text: str) -> list[str]:
    """Fields of a Kueue Configuration that its Go types do not have, and bad values."""
    config = yaml.safe_load(text)
    out = []
    if config.get("apiVersion") != "config.kueue.x-k8s.io/v1beta2" or config.get(
            "kind") != "Configuration":
        out.append("not a config.kueue.x-k8s.io/v1beta2 Configuration")
    for key, value in config.items():
        if key not in CONFIGURATION_FIELDS:
            out.append(f"unknown field {key}")
        elif isinstance(CONFIGURATION_FIELDS[key], set):
            out += [f"unknown field {key}.{k}" for k in value
                    if k not in CONFIGURATION_FIELDS[key]]
    strategies = (config.get("fairSharing") or {}).get("preemptionStrategies") or []
    out += [f"unknown preemption strategy {s}" for s in strategies
            if s not in PREEMPTION_STRATEGIES]
    return out


def test_the_configuration_the_chart_receives_is_kueues() -> None:
    text = deployed_manager_config()
    assert text is not None and configuration_problems(text) == []
    config = yaml.safe_load(text)
    assert config["fairSharing"] == {"preemptionStrategies": [
        "LessThanOrEqualToFinalShare", "LessThanInitialShare"]}
    # the integrations tpurl's workloads need: its JobSets, its convert and export Jobs
    assert {"jobset.x-k8s.io/jobset", "batch/job"} <= set(config["integrations"]["frameworks"])
    # the toolkit's own chart values are kept beside it
    values = yaml.safe_load(KUEUE_VALUES.read_text())
    assert values["controllerManager"]["featureGates"] == [
        {"name": "TopologyAwareScheduling", "enabled": True}]
    # the checker finds a misspelt field (the v1beta1 spelling of the section's switch)
    assert configuration_problems(text.replace("preemptionStrategies", "enable")) == [
        "unknown field fairSharing.enable"]


def test_the_plan_says_who_sets_fair_sharing(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Shipped values with the section: set by the deploy. Values without it: the plan
    says the weights do NOT act."""
    s = settings_with_teams(tmp_path, monkeypatch, TWO_TEAMS, TUTORIAL)
    assert s.shape is not None

    def fair_line() -> str:
        [line] = [x for x in cluster_shape.shape_lines(s.shape, load_teams())
                  if "fair sharing" in x or "fair-sharing weights" in x]
        return line
    assert fair_line().startswith("  fair sharing: set by the deploy")
    bare = tmp_path / "values.yaml"
    bare.write_text(KUEUE_VALUES.read_text().replace("fairSharing:", "# fairSharing:")
                    .replace("      preemptionStrategies", "      # preemptionStrategies"))
    assert not deploy_sets_fair_sharing(bare)
    monkeypatch.setattr(cluster_shape, "deploy_sets_fair_sharing", lambda: False)
    assert fair_line().startswith("  fair-sharing weights do NOT act")


def test_the_fake_gcluster_refuses_what_gcluster_and_helm_refuse(
        two_teams: tuple[InfraSettings, InfraSettings]) -> None:
    """A setting direct-helm-install does not declare (gcluster validateSettings), an
    apply_manifests name past 44 characters (kubectl-apply variables.tf), and Kueue
    installed twice under one release name (Helm)."""
    modules, _ = _render(two_teams[0])
    by_id = {m["id"]: m for m in modules}
    by_id["kueue-install"]["settings"]["values"] = ["x"]
    assert module_problems(modules) == [
        "kueue-install.settings.values: a setting was added that is not found in the module"]
    del by_id["kueue-install"]["settings"]["values"]
    by_id["workload-manager-install"]["settings"]["apply_manifests"][0]["name"] = "n" * 45
    assert "must not exceed 44 characters" in module_problems(modules)[0]
    by_id["workload-manager-install"]["settings"]["apply_manifests"][0]["name"] = "n" * 44
    assert module_problems(modules) == []
    by_id["workload-manager-install"]["settings"]["kueue"]["install"] = True
    assert module_problems(modules) == [
        "cannot re-use a name that is still in use: kueue in kueue-system"]


def test_the_kueue_edits_apply_once_and_fail_loudly_when_the_example_changes(
        two_teams: tuple[InfraSettings, InfraSettings]) -> None:
    """Each Kueue edit applied again to the blueprint it edited changes nothing; an example
    without the module the objects wait for, or without kueue.config_path,
    stops the deploy naming the edit instead of deploying Kueue without tpurl's objects."""
    from flows.backends.gke.infra.blueprint import apply_edit, load_edits
    from flows.core.failures import StageFailed

    ctx = edit_context(two_teams[0].gke, two_teams[0].shape, two_teams[0].team)
    objects = next(e for e in load_edits() if e.kueue_manifest)
    chart = next(e for e in load_edits() if e.add_module and e.stage)
    doc = YAML().load(edit_blueprint(EXAMPLE.read_text(), ctx))
    assert not apply_edit(doc, chart) and not apply_edit(doc, objects)
    with pytest.raises(StageFailed, match="kueue-objects-as-a-manifest"):
        edit_blueprint(EXAMPLE.read_text(), ctx, [objects])  # kueue-install never added
    without_path = EXAMPLE.read_text().replace(
        "        config_path: $(vars.kueue_configuration_path)\n", "")
    with pytest.raises(StageFailed, match=r"no kueue\.config_path"):
        edit_blueprint(without_path, ctx, [chart, objects])
