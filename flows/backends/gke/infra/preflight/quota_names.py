"""Which Compute Engine TPU quota each generation's VMs count against, per mode, by the ids
Cloud Quotas gives them, and where each fact comes from (read 2026-12-06).

What Google's pages say (the sources this tool could read):
- GKE's TPU troubleshooting page ("Insufficient quota to satisfy the request", "On-demand or
  Spot VM quota"): an on-demand or Spot TPU slice node pool needs Compute Engine API quota
  (compute.googleapis.com), not the Cloud TPU API's (tpu.googleapis.com); a node pool that
  uses a TPU reservation needs no TPU quota. The page's table of quota names per TPU version
  could not be read here.
- Cloud TPU's "Plan your Cloud TPU resources": Spot VMs use preemptible quota; its
  "Request Cloud TPUs using Flex-start" (the queued resources API, not GKE's node pools):
  "ensure you have sufficient preemptible quota to use Flex-start".
- Compute Engine's provisioning models page, as quoted by the field reports below (the
  sentence itself was not reachable here): "When you create a Flex-start VM, preemptible
  quota is consumed. If your project lacks preemptible quota, then standard quota is
  consumed." So flex-start, and queued provisioning (flex-start with queued provisioning),
  count against either; pre-flight passes them on whichever has room.

What no Google page read here names: the quota ids. These are what Cloud Quotas answers
(``gcloud beta quotas info describe ID --service=compute.googleapis.com``), as public field
reports of 2026-07 and 2026-08 record them (projects' notes of their own ``gcloud quotas
info`` output, found by searching public GitHub text); they are reported, not documented,
and the first real run confirms them:
- v6e: spot (and flex-start first) ``PREEMPTIBLE-TPU-V6E-per-project-region``; on-demand
  has no v6e id of its own and counts against ``TPUS-PER-TPU-FAMILY-per-project-region``
  with the dimension ``tpu_family=CT6E``.
- v5p: ``TPU-V5P-per-project-region`` and ``PREEMPTIBLE-TPU-V5P-per-project-region``.
- tpu7x: ``PREEMPTIBLE-TPU7X-per-project-region``; its on-demand quota, like v6e's, has no
  id of its own and is said to be the family quota, under a ``tpu_family`` value no report
  gives: unknown.
The same reports find that the regional listing pre-flight reads (compute v1 ``regions.get``
``quotas[]``, ``gcloud compute regions describe``) carries only the older TPU metrics (v5e's
``TPU_LITE_PODSLICE_V5`` and the like), none of these: so for these generations the check
normally finds no metric and says "unknown", naming the id to read. A listing that does
carry one is matched by the id's name (``PREEMPTIBLE_TPU_V6E``), never guessed from it.
"""

from __future__ import annotations

from dataclasses import dataclass

SERVICE = "compute.googleapis.com"


@dataclass(frozen=True)
class QuotaId:
    """A Cloud Quotas id and the dimension that picks this generation within it (beside
    the region)."""

    id: str
    dimension: str = ""

    @property
    def metric(self) -> str:
        """The metric's name as a regional listing would spell it (``TPU-V5P-per-project-
        region`` → ``TPU_V5P``); a family quota has none of the generation's own."""
        return self.id.removesuffix("-per-project-region").replace("-", "_")


@dataclass(frozen=True)
class GenerationQuota:
    """One generation's TPU quotas: on-demand's and the preemptible one (None: unknown)."""

    on_demand: QuotaId | None
    preemptible: QuotaId | None


FAMILY = "TPUS-PER-TPU-FAMILY-per-project-region"
QUOTAS: dict[str, GenerationQuota] = {  # flows/config/tpu.py's generations
    "v6e": GenerationQuota(QuotaId(FAMILY, "tpu_family=CT6E"),
                           QuotaId("PREEMPTIBLE-TPU-V6E-per-project-region")),
    "v5p": GenerationQuota(QuotaId("TPU-V5P-per-project-region"),
                           QuotaId("PREEMPTIBLE-TPU-V5P-per-project-region")),
    "tpu7x": GenerationQuota(None, QuotaId("PREEMPTIBLE-TPU7X-per-project-region")),
}


def quota_ids(generation: str, preemptible: bool | None) -> list[QuotaId]:
    """The quota ids a mode counts against (``preemptible``: True spot, False on-demand,
    None flex-start/queued, either); an unknown one is left out. Pure."""
    quotas = QUOTAS.get(generation, GenerationQuota(None, None))
    kinds = {True: [quotas.preemptible], False: [quotas.on_demand],
             None: [quotas.preemptible, quotas.on_demand]}[preemptible]
    return [q for q in kinds if q is not None]


def describe_command(quota: QuotaId, project: str) -> str:
    """The command that reads one quota's value per region from Cloud Quotas."""
    return f"gcloud beta quotas info describe {quota.id} --service={SERVICE} --project={project}"


def metric_matches(metric: str, family: str, preemptible: bool) -> bool:
    """Whether a regional listing's metric is this generation's TPU quota of that kind: the
    generation's part (flows/config/tpu.py quota_family) in a TPU metric, with the
    PREEMPTIBLE prefix or without; hyphens read as underscores (the Cloud Quotas spelling).
    A family-wide metric (TPUS_PER_TPU_FAMILY) names no generation and never matches."""
    name = metric.upper().replace("-", "_")
    return "TPU" in name and family in name and name.startswith("PREEMPTIBLE_") == preemptible
