"""What the fake gcluster's deploy makes of the two Cluster Toolkit modules that install
Helm charts on the cluster, read at GoogleCloudPlatform/cluster-toolkit 1047080:

- modules/management/kubectl-apply (main.tf, variables.tf): ``kueue.install`` helm-installs
  Kueue's chart as release ``kueue`` in ``kueue-system`` with the module's own values
  (kueue/kueue-helm-values.yaml: no ``managerConfig``, so Kueue's Configuration is the
  chart's default, which has no fairSharing); ``configure_kueue`` applies
  ``templatefile(kueue.config_path, kueue.config_template_vars)`` only when it installs
  Kueue (its count); each ``apply_manifests`` entry (name, enable, content, source,
  template_vars, wait_for_rollout, namespace; a name of at most 44 characters) is applied as
  its own release, a .tftpl source rendered by templatefile.
- community/modules/management/direct-helm-install (main.tf, variables.tf): one
  helm_release of ``chart_name`` from ``chart_repository`` with ``values_yaml``, each a path
  (``fileexists(v) ? file(v) : v``) or YAML text.

Kueue's chart writes ``managerConfig.controllerManagerConfigYaml`` into ConfigMap
``kueue-system/kueue-manager-config`` and adds ``internalCertManagement`` when it has none
and cert-manager is not enabled (kubernetes-sigs/kueue v0.17.1
charts/kueue/templates/manager/manager-config.yaml); without the value, the chart's default
(charts/kueue/values.yaml), abridged here to what tpurl reads: no fairSharing section.

gcluster refuses a setting that is not one of the module's variables before anything is
deployed (pkg/config/validate.go validateSettings; pkg/config/errors.go UnknownModuleSetting:
"a setting was added that is not found in the module"). Two releases of one name in one
namespace are refused by Helm ("cannot re-use a name that is still in use").
"""

from __future__ import annotations

from typing import Any

import yaml

KUBECTL_APPLY = "modules/management/kubectl-apply"
DIRECT_HELM_INSTALL = "community/modules/management/direct-helm-install"
INPUTS = {
    KUBECTL_APPLY: {
        "target_architecture", "project_id", "cluster_id", "apply_manifests", "kueue",
        "enable_pathways_for_tpus", "gke_cluster_exists", "jobset", "cert_manager",
        "gpu_operator", "nvidia_dra_driver", "gib", "system_node_pool_id", "asapd_lite",
        "module_id", "cluster_endpoint", "cluster_ca_certificate", "access_token",
        "service_account_annotations"},
    DIRECT_HELM_INSTALL: {
        "release_name", "chart_name", "chart_repository", "chart_version", "devel",
        "namespace", "create_namespace", "values_yaml", "set_values", "description",
        "atomic", "wait", "wait_for_jobs", "timeout", "cleanup_on_fail",
        "dependency_update", "disable_crd_hooks", "disable_openapi_validation",
        "disable_webhooks", "force_update", "lint", "max_history", "recreate_pods",
        "render_subchart_notes", "reset_values", "reuse_values", "skip_crds", "keyring",
        "pass_credentials", "verify", "postrender", "dependencies", "cluster_id",
        "cluster_endpoint", "cluster_ca_certificate", "access_token"},
}
REQUIRED = {DIRECT_HELM_INSTALL: {"release_name", "chart_name", "cluster_id"}}
KUEUE_CHART = ("oci://registry.k8s.io/kueue/charts", "kueue")
KUEUE_RELEASE = ("kueue-system", "kueue")
# charts/kueue/values.yaml at v0.17.1, abridged: fairSharing ships commented out
CHART_DEFAULT_CONFIG = ("apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\n"
                        "webhook:\n  port: 9443\nintegrations:\n  frameworks:\n"
                        "  - \"batch/job\"\n  - \"jobset.x-k8s.io/jobset\"\n  - \"pod\"\n")


def module_problems(modules: list[dict[str, Any]]) -> list[str]:
    """What gcluster (unknown or missing settings) or Helm (a release name taken twice)
    refuses in these modules, first problem first."""
    out = []
    sources = {m.get("id"): m.get("source") for m in modules}
    for module in modules:
        source, settings = module.get("source"), module.get("settings") or {}
        if source not in INPUTS:
            continue
        for key in settings:
            if key not in INPUTS[source]:
                out.append(f"{module['id']}.settings.{key}: a setting was added that is not "
                           "found in the module")
        # a used gke-cluster's output cluster_id fills the input (pkg/config/expand.go)
        used_cluster = any(sources.get(u) == "modules/scheduler/gke-cluster"
                           for u in module.get("use") or [])
        for key in sorted(REQUIRED.get(source, set()) - set(settings)):
            if not (key == "cluster_id" and used_cluster):
                out.append(f"{module['id']}: missing required setting {key!r}")
        for entry in settings.get("apply_manifests") or []:
            if len(str(entry.get("name") or "")) > 44:
                out.append("The 'name' attribute in apply_manifests must not exceed 44 "
                           "characters to ensure the final Helm release name fits within the "
                           "53-character limit.")
    releases = [r for r in (release(m) for m in modules) if r is not None]
    for i, (where, _values) in enumerate(releases):
        if where in [r[0] for r in releases[:i]]:
            out.append(f"cannot re-use a name that is still in use: {where[1]} in "
                       f"{where[0]}")
    return out


def release(module: dict[str, Any]) -> tuple[tuple[str, str], list[str] | None] | None:
    """((namespace, release name), the values given or None: the toolkit's own) of the
    Kueue chart this module installs; None if it installs none."""
    settings = module.get("settings") or {}
    if module.get("source") == KUBECTL_APPLY and (settings.get("kueue") or {}).get("install"):
        return KUEUE_RELEASE, None
    if module.get("source") == DIRECT_HELM_INSTALL and (
            settings.get("chart_repository"), settings.get("chart_name")) == KUEUE_CHART:
        where = (str(settings.get("namespace") or "default"), str(settings["release_name"]))
        return where, list(settings.get("values_yaml") or [])
    return None


def kueue_manager_config(modules: list[dict[str, Any]], staged: dict[str, str]) -> str | None:
    """The text of ConfigMap kueue-system/kueue-manager-config after the deploy, as the
    chart renders it from the values of the module that installs Kueue; None: no Kueue.
    ``staged``: the ghpc_stage files by the path the blueprint names."""
    for module in modules:
        found = release(module)
        if found is None:
            continue
        _where, values = found
        merged: dict[str, Any] = {}
        for value in values or []:
            path = value.removeprefix('$(ghpc_stage("').removesuffix('"))')
            text = staged.get(path, value)
            merged.update(yaml.safe_load(text) or {})
        given = (merged.get("managerConfig") or {}).get("controllerManagerConfigYaml")
        config = yaml.safe_load(given or CHART_DEFAULT_CONFIG)
        config.setdefault("internalCertManagement", {
            "enable": True, "webhookServiceName": "kueue-webhook-service",
            "webhookSecretName": "kueue-webhook-server-cert"})
        return str(yaml.safe_dump(config, sort_keys=False))
    return None


def kueue_objects_source(modules: list[dict[str, Any]]) -> tuple[str, dict[str, Any]] | None:
    """(the template's path as the blueprint names it, its template vars) of the Kueue
    objects kubectl-apply applies: ``kueue.config_path`` when it installs Kueue, else an
    ``apply_manifests`` entry of that source; None when it applies none."""
    for module in modules:
        settings = module.get("settings") or {}
        if module.get("source") != KUBECTL_APPLY:
            continue
        kueue = settings.get("kueue") or {}
        path = kueue.get("config_path")
        if kueue.get("install") and path:
            return str(path), dict(kueue.get("config_template_vars") or {})
        for entry in settings.get("apply_manifests") or []:
            if entry.get("enable", True) and entry.get("source") == path and path:
                return str(path), dict(entry.get("template_vars") or {})
    return None
