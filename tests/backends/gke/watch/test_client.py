"""flows/backends/gke/watch/client.py: which way to the cluster, tried against the fake API."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from flows.backends.gke.watch import client
from tests.fakes.kube_api import FakeApiServer
from tests.support.profiles import tutorial_profile


def kubeconfig(url: str, context: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Config", "current-context": "other",
            "clusters": [{"name": "c", "cluster": {"server": url}}],
            "users": [{"name": "u", "user": {}}],
            "contexts": [{"name": context, "context": {"cluster": "c", "user": "u"}},
                         {"name": "other", "context": {"cluster": "c", "user": "u"}}]}


def test_context_name_is_the_gcloud_one() -> None:
    assert client.kubeconfig_context(tutorial_profile()) == "gke_my-proj-123_us-east5_tpurl-v6e"


def test_kubeconfig_context_with_a_gcp_token(server: FakeApiServer, tmp_path: Path) -> None:
    profile = tutorial_profile()
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump(kubeconfig(server.url, client.kubeconfig_context(profile))))
    tokens = iter(["tok-1", "tok-2"])
    cluster = client.connect(profile, environ={"KUBECONFIG": str(path)},
                             token_source=lambda: next(tokens))
    assert cluster.how == "kubeconfig context gke_my-proj-123_us-east5_tpurl-v6e"
    assert cluster.api.configuration.api_key == {"authorization": "tok-1"}
    assert cluster.api.configuration.api_key_prefix == {"authorization": "Bearer"}
    cluster.core.list_namespaced_secret("default")  # reaches the fake
    assert server.kube.requests


def test_kubernetes_credentials_block_wins(server: FakeApiServer,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    profile = tutorial_profile()
    gke = profile.gke.model_copy(update={})
    object.__setattr__(gke, "__dict__", {**gke.__dict__, "kubernetes_credentials_block": "prod"})
    profile = profile.model_copy(update={"gke": gke})
    seen: list[str] = []

    def fake_block(name: str) -> tuple[dict[str, Any], str]:
        seen.append(name)
        return kubeconfig(server.url, "from-block"), "from-block"

    monkeypatch.setattr(client, "_kubernetes_block_config", fake_block)
    cluster = client.connect(profile, environ={"KUBERNETES_SERVICE_HOST": "10.0.0.1"})
    assert seen == ["prod"] and "KubernetesCredentials block 'prod'" in cluster.how
    cluster.core.list_namespaced_secret("default")


def test_the_profiles_blocks_reach_the_cluster_with_the_blocks_own_token(
        server: FakeApiServer, prefect_api: None, tmp_path: Path) -> None:
    """Both blocks as a user saves them in Prefect: a KubernetesCredentials block holding the
    cluster's kubeconfig (the context named), and a GcpCredentials block holding a service
    account's key, whose access token (refreshed from the key's token endpoint) is the bearer
    token of every call to the cluster and is registered as a secret."""
    import base64
    import json

    from prefect_gcp import GcpCredentials
    from prefect_kubernetes.credentials import KubernetesClusterConfig, KubernetesCredentials

    from flows.core.redaction import redact
    from tests.fakes.adc_key import key_identity, write_adc_key
    from tests.fakes.oauth_token import token_endpoint

    with token_endpoint() as endpoint:
        key = write_adc_key(tmp_path / "key.json", project="my-proj-123", token_uri=endpoint.url)
        endpoint.know(*key_identity(key))
        GcpCredentials(service_account_info=json.loads(key.read_text())).save(
            "team-gcp", overwrite=True)
        KubernetesCredentials(cluster_config=KubernetesClusterConfig(
            config=kubeconfig(server.url, "from-block"), context_name="from-block")).save(
            "team-cluster", overwrite=True)
        profile = tutorial_profile(**{"gke.kubernetes_credentials_block": "team-cluster",
                                      "gke.gcp_credentials_block": "team-gcp"})
        cluster = client.connect(profile, environ={})
        cluster.core.list_namespaced_secret("default")  # reaches the fake
        assert endpoint.issued
        token = endpoint.issued[-1]
    assert cluster.how == ("KubernetesCredentials block 'team-cluster' (context from-block), "
                           "GcpCredentials block 'team-gcp'")
    assert cluster.api.configuration.api_key == {"authorization": token}
    assert server.kube.requests
    basic = base64.b64encode(f"x:{token}".encode()).decode()
    assert basic not in redact(basic)  # registered: every form of it goes


def test_a_kubernetes_block_without_a_cluster_config_is_refused_naming_how_to_make_one(
        prefect_api: None) -> None:
    from prefect_kubernetes.credentials import KubernetesCredentials

    KubernetesCredentials().save("no-config", overwrite=True)
    profile = tutorial_profile(**{"gke.kubernetes_credentials_block": "no-config"})
    with pytest.raises(ValueError, match=r"'no-config' has no cluster_config; .*from_file"):
        client.connect(profile, environ={})
