"""The Kueue configuration the blueprint stages for a profile: tpurl's template
(deployments/blueprints/kueue-configuration.yaml.tftpl) with its one TPU flavor made into one
ResourceFlavor per capacity mode of the chain, and, for ``queued``, Dynamic Workload
Scheduler's AdmissionCheck and ProvisioningRequestConfig. Pure: text in, text out.

What Kueue does with flavors in chain order, and what it does not:

- Flavor fungibility (kueue v0.17.1 apis/kueue/v1beta2/clusterqueue_types.go:391-431,
  FlavorFungibility; defaults whenCanBorrow MayStopSearch, whenCanPreempt TryNextFlavor):
  the flavors of a resource group are tried in their listed order, and a workload takes the
  first whose nodeLabels its pods' node selection matches and whose quota it fits
  (pkg/scheduler/flavorassigner/flavorassigner.go). So a JobSet that names no mode lands on
  the chain's first mode; one that names a mode (``tpurl/capacity``, capacity_pools.py)
  matches that mode's flavor only.
- It does not fall back on a stockout: quota is all Kueue counts. A workload admitted to the
  on-demand flavor whose pods the cluster autoscaler cannot place (GKE's FailedScaleUp) stays
  admitted there; Kueue never moves it to the next flavor (kubernetes-sigs/kueue#2560,
  "ResourceFlavor fallback", open). The pipeline's train stage decides the fallback and
  resubmits the JobSet for the next mode.
- Quota: each TPU flavor admits ``num_slices`` slices (``${tpu_quota}``, every chip of the
  run): the pipeline never runs two TPU JobSets at once, so the chain's flavors need not share
  one quota, and any one mode can hold the whole run.
- ``queued``: its flavor carries the ProvisioningRequest admission check only (a ClusterQueue's
  admissionChecksStrategy with onFlavors, clusterqueue_types.go:147-170): a workload on
  another flavor is admitted on quota alone. The check's ProvisioningRequestConfig
  (provisioningClassName ``queued-provisioning.gke.io``, as Cluster Toolkit's
  examples/gke-consumption-options/dws-flex-start-queued-provisioning/tpu-dws-queues.yaml.tftpl)
  passes its parameters into every ProvisioningRequest it creates (kueue v0.17.1
  pkg/controller/admissionchecks/provisioning/controller.go:280, parametersKueueToProvisioning),
  among them ``maxRunDurationSeconds``: gke.max_run_hours, the nodes' lifetime.
- Teams (deployments/teams.yaml): each gets its own ClusterQueue in the cluster's cohort and
  a LocalQueue, after the profile's own objects (infra/team_kueue.py says how and why), and
  its Kubernetes service account, which its pods run as (team_identity.py).
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from flows.backends.gke.capacity_pools import flavor_name, pool_node_labels, pool_taints
from flows.backends.gke.infra.team_kueue import team_objects
from flows.backends.gke.infra.team_quota import TeamQuota, checked_quotas
from flows.backends.gke.team_identity import team_service_accounts
from flows.common.paths import REPO_ROOT
from flows.config.gke import GkeSection
from flows.config.teams import load_teams

KUEUE_TEMPLATE = REPO_ROOT / "deployments" / "blueprints" / "kueue-configuration.yaml.tftpl"
TEMPLATE_FLAVOR = "tpuv6e-flavor"  # the template's one TPU flavor
ADMISSION_CHECK = "dws-prov"  # the toolkit example's names
PROVISIONING_CONFIG = "dws-config"
QUEUED_CLASS = "queued-provisioning.gke.io"
_PLACEHOLDER = re.compile(r"\$\{([a-z_]+)\}")
_SENTINEL = re.compile(r"TPURLVAR_([a-z_]+)_TPURLVAR")


def _header(text: str) -> str:
    """The template's leading comments, kept in what is staged."""
    lines = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        lines.append(line)
    return "\n".join(lines) + "\n" if lines else ""


def _tpu_flavor(template: dict[str, Any], mode: str, accelerator: str, generation: str
                ) -> dict[str, Any]:
    spec = template.get("spec") or {}
    tolerations = [*(spec.get("tolerations") or []),
                   *({"effect": t["effect"], "key": t["key"], "operator": "Equal",
                      "value": t["value"]} for t in pool_taints(mode))]
    return {"apiVersion": template["apiVersion"], "kind": "ResourceFlavor",
            "metadata": {"name": flavor_name(mode, generation)},
            "spec": {"nodeLabels": {"cloud.google.com/gke-tpu-accelerator": accelerator,
                                    **pool_node_labels(mode)},
                     "tolerations": tolerations}}


def _queued_objects(api: str, gke: GkeSection) -> list[dict[str, Any]]:
    seconds = int((gke.max_run_hours or 0) * 3600)
    return [
        {"apiVersion": api, "kind": "AdmissionCheck", "metadata": {"name": ADMISSION_CHECK},
         "spec": {"controllerName": "kueue.x-k8s.io/provisioning-request",
                  "parameters": {"apiGroup": "kueue.x-k8s.io",
                                 "kind": "ProvisioningRequestConfig",
                                 "name": PROVISIONING_CONFIG}}},
        {"apiVersion": api, "kind": "ProvisioningRequestConfig",
         "metadata": {"name": PROVISIONING_CONFIG},
         "spec": {"provisioningClassName": QUEUED_CLASS, "managedResources": ["google.com/tpu"],
                  "parameters": {"tpu-topology": gke.topology,
                                 "maxRunDurationSeconds": str(seconds)}}}]


def kueue_documents(text: str, gke: GkeSection,
                    quotas: dict[str, TeamQuota] | None = None) -> list[dict[str, Any]]:
    """The template's documents for the profile's chain, then the teams' queues (``quotas``,
    none by default); ``${name}`` placeholders are kept (as TPURLVAR_name_TPURLVAR) for
    Terraform's templatefile to fill."""
    docs = [d for d in yaml.safe_load_all(_PLACEHOLDER.sub(r"TPURLVAR_\1_TPURLVAR", text)) if d]
    template = next(d for d in docs if d["kind"] == "ResourceFlavor"
                    and d["metadata"]["name"] == TEMPLATE_FLAVOR)
    accelerator = template["spec"]["nodeLabels"]["cloud.google.com/gke-tpu-accelerator"]
    chain = gke.capacity_chain
    out: list[dict[str, Any]] = []
    for doc in docs:
        if doc is template:
            out += [_tpu_flavor(template, mode, accelerator, gke.machine.generation)
                    for mode in chain]
            if "queued" in chain:
                out += _queued_objects(template["apiVersion"], gke)
            continue
        if doc["kind"] == "ClusterQueue":
            doc = _with_chain_flavors(doc, chain, gke.machine.generation)
        out.append(doc)
    base = next((d for d in out if d["kind"] == "ClusterQueue"), None)
    if quotas and base is not None:
        out += team_objects(base, quotas, gke.cluster, gke.namespace)
        out += team_service_accounts(quotas, gke.namespace)  # team_identity.py
    return out


def _with_chain_flavors(cq: dict[str, Any], chain: tuple[str, ...], generation: str
                        ) -> dict[str, Any]:
    spec = dict(cq["spec"])
    groups = []
    for group in spec.get("resourceGroups") or []:
        flavors = []
        for entry in group.get("flavors") or []:
            if entry["name"] == TEMPLATE_FLAVOR:  # one per mode, in the chain's order
                flavors += [{**entry, "name": flavor_name(mode, generation)} for mode in chain]
            else:
                flavors.append(entry)
        groups.append({**group, "flavors": flavors})
    spec["resourceGroups"] = groups
    if "queued" in chain:
        spec["admissionChecksStrategy"] = {"admissionChecks": [
            {"name": ADMISSION_CHECK, "onFlavors": [flavor_name("queued", generation)]}]}
    return {**cq, "spec": spec}


class _NoAliases(yaml.SafeDumper):
    """Each flavor's quotas written out, not as a YAML alias of the first one's."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def cluster_team_quotas(gke: GkeSection) -> dict[str, TeamQuota]:
    """The teams file's quotas on this profile's cluster (its total TPU chips, the chips
    the blueprint's TPU pool holds); a file that does not fit: ProfileError."""
    return checked_quotas(load_teams(), gke.total_chips, {})


def kueue_configuration_text(gke: GkeSection, text: str | None = None,
                             quotas: dict[str, TeamQuota] | None = None) -> str:
    """What the blueprint stages as tpurl-kueue-configuration.yaml.tftpl for this profile:
    with the teams file's queues unless ``quotas`` is given."""
    text = KUEUE_TEMPLATE.read_text() if text is None else text
    quotas = cluster_team_quotas(gke) if quotas is None else quotas
    body = yaml.dump_all(kueue_documents(text, gke, quotas), Dumper=_NoAliases,
                         sort_keys=False, width=4096)
    return _header(text) + _SENTINEL.sub(r"${\1}", body)


def render_template(text: str, values: dict[str, str]) -> str:
    """Terraform templatefile's ``${name}`` interpolation, for the names our template uses."""
    for key, value in values.items():
        text = text.replace("${" + key + "}", value)
    return text
