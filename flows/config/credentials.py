"""The profile's Prefect blocks for cluster and Google access (part of ``GkeSection``)."""

from __future__ import annotations

from flows.config.section_base import StrictModel


class GkeCredentials(StrictModel):
    """Prefect blocks for cluster and Google access (flows/backends/gke/watch/client.py);
    None: the ambient kubeconfig / Application Default Credentials."""

    kubernetes_credentials_block: str | None = None
    """A Prefect block with the cluster's credentials (else the ambient kube config or workload
    identity)."""
    gcp_credentials_block: str | None = None
    """A Prefect GcpCredentials block (else Application Default Credentials)."""
