"""Cluster access the Prefect way, as a thin seam the tests replace with the fake API.

Order: a prefect-kubernetes ``KubernetesCredentials`` block when the profile names
one (``gke.kubernetes_credentials_block``), else in-cluster config (the flow runs in a pod of
a Kubernetes work pool), else the kubeconfig context that ``gcloud container clusters
get-credentials`` writes for the profile's cluster, ``gke_<project>_<region>_<cluster>``.

Why the synchronous ``kubernetes`` client and not the block's own ``get_client``: prefect-
kubernetes 0.8.0 hands out kubernetes-asyncio clients and has no JobSet support; the backend
runs in a Prefect task thread and wants plain blocking calls. So the block is read for its
kubeconfig (``cluster_config.config`` + ``context_name``) and the sync client is built from it.

GKE tokens: a kubeconfig from gcloud authenticates with the ``gke-gcloud-auth-plugin`` exec
plugin, which a flow image may lack. When the profile names a prefect-gcp ``GcpCredentials``
block (``gke.gcp_credentials_block``), its access token is used as the bearer token instead and
refreshed through the client's ``refresh_api_key_hook``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

from flows.backends.gke.watch.kueue import KUEUE_VERSIONS, served_kueue_version
from flows.config.gke_section import gke_section
from flows.config.profile import Profile
from flows.core.redaction import register

JOBSET_GROUP, JOBSET_VERSION, JOBSETS = "jobset.x-k8s.io", "v1alpha2", "jobsets"
KUEUE_GROUP, WORKLOADS = "kueue.x-k8s.io", "workloads"
TokenSource = Callable[[], str]


@dataclass
class Cluster:
    """The API groups the backend uses, over one ApiClient (one connection pool)."""

    api: k8s.ApiClient
    core: k8s.CoreV1Api
    custom: k8s.CustomObjectsApi
    how: str  # how it connected, for the log (never holds a credential)
    kueue_version: str | None = None  # the served Kueue version, found once (kueue_version())

    @classmethod
    def of(cls, api: k8s.ApiClient, how: str = "injected") -> Cluster:
        return cls(api=api, core=k8s.CoreV1Api(api), custom=k8s.CustomObjectsApi(api), how=how)


def kueue_version(cluster: Cluster) -> str:
    """The Kueue version the cluster serves, from API discovery (GET /apis: discovery is
    open to every authenticated user through the system:discovery ClusterRole, so the flow's
    Role needs nothing for it); read once per Cluster. A cluster serving none of ours gets
    the newest, whose 404s the watch then reports."""
    if cluster.kueue_version is None:
        groups = k8s.ApisApi(cluster.api).get_api_versions().groups or []
        served = [v.version for g in groups if g.name == KUEUE_GROUP for v in g.versions or []]
        cluster.kueue_version = served_kueue_version(served) or KUEUE_VERSIONS[0]
    return cluster.kueue_version


def kubeconfig_context(profile: Profile) -> str:
    """The context name gcloud writes for a regional cluster (Cluster Toolkit's are)."""
    return gke_section(profile).kube_context


def with_bearer_token(configuration: k8s.Configuration, token: TokenSource) -> None:
    """Authenticate with a refreshed OAuth token (GcpCredentials) instead of an exec plugin."""
    def refresh(cfg: k8s.Configuration) -> None:
        cfg.api_key = {"authorization": token()}
        cfg.api_key_prefix = {"authorization": "Bearer"}

    refresh(configuration)
    # kubernetes' Configuration declares the hook only by setting it to None in __init__
    # (so its inferred type is None); get_api_key_with_prefix calls it with the configuration
    configuration.refresh_api_key_hook = refresh  # type: ignore[assignment]


def gcp_token_source(block_name: str) -> TokenSource:
    from prefect_gcp import GcpCredentials

    credentials = GcpCredentials.load(block_name)

    def token() -> str:
        value = str(credentials.get_access_token())
        register(value)  # a bearer token: out of every text, as the HF token is
        return value
    return token


def _kubernetes_block_config(block_name: str) -> tuple[dict[str, Any], str]:
    from prefect_kubernetes.credentials import KubernetesCredentials

    block = KubernetesCredentials.load(block_name)
    if block.cluster_config is None:
        raise ValueError(f"KubernetesCredentials block {block_name!r} has no cluster_config; "
                         "create it with KubernetesClusterConfig.from_file(context_name=...)")
    return dict(block.cluster_config.config), block.cluster_config.context_name


def connect(profile: Profile, environ: Mapping[str, str] | None = None,
            token_source: TokenSource | None = None) -> Cluster:
    """The cluster of the profile, reached as the module docstring describes."""
    env = os.environ if environ is None else environ
    configuration = k8s.Configuration()
    gke = gke_section(profile)
    if block := gke.kubernetes_credentials_block:
        config_dict, context = _kubernetes_block_config(block)
        k8s_config.load_kube_config_from_dict(config_dict, context=context,
                                              client_configuration=configuration)
        how = f"KubernetesCredentials block {block!r} (context {context})"
    elif env.get("KUBERNETES_SERVICE_HOST"):
        k8s_config.load_incluster_config(client_configuration=configuration)
        how = "in-cluster service account"
    else:
        context = kubeconfig_context(profile)
        # KUBECONFIG read now, not at import time as the client's default location is
        k8s_config.load_kube_config(config_file=env.get("KUBECONFIG"), context=context,
                                    client_configuration=configuration)
        how = f"kubeconfig context {context}"
    if token_source is None and (gcp := gke.gcp_credentials_block):
        token_source = gcp_token_source(gcp)
        how += f", GcpCredentials block {gcp!r}"
    if token_source is not None:
        with_bearer_token(configuration, token_source)
    return Cluster.of(k8s.ApiClient(configuration), how)


def short_error(exc: BaseException) -> str:
    """An API error in a few words (status and reason), for warnings and summaries."""
    if isinstance(exc, ApiException):
        return f"HTTP {exc.status} {exc.reason}"
    return f"{exc.__class__.__name__}: {str(exc)[:200]}"


def api_reason(exc: BaseException) -> str:
    """The status and the server's message, for a retry notice (once per retry)."""
    if isinstance(exc, ApiException):
        message = ""
        try:
            message = str(json.loads(exc.body or "{}").get("message") or "")
        except (ValueError, AttributeError):
            message = str(exc.body or "")[:200]
        return f"HTTP {exc.status} {exc.reason}" + (f": {message[:200]}" if message else "")
    return short_error(exc)
