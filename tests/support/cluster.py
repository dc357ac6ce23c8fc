"""A client of the fake Kubernetes API server (tests/fakes/kube_api/) at its URL, with no
authentication: the same ``Cluster`` the flow's ``connect`` builds
(flows/backends/gke/watch/client.py), for the tests and the watch benchmark."""

from __future__ import annotations

from kubernetes import client as k8s

from flows.backends.gke.watch.client import Cluster


def cluster_at(url: str) -> Cluster:
    configuration = k8s.Configuration()
    configuration.host = url
    return Cluster.of(k8s.ApiClient(configuration), f"API at {url}")
