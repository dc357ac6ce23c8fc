"""Pods that outlived their node: the evidence of a slice lost under a running program.

A spot reclaim or a VM failure can take the nodes before any kubelet posts a thing; the pods
then stay bound to nodes that no longer exist until PodGC removes them (kubernetes
pkg/controller/podgc/gc_controller.go, 40 s quarantine). A program that failed on its own
ends differently: the JobSet controller deletes its Jobs, each live kubelet stops its pods
and deletes them once their phase is terminal (pkg/kubelet/status/status_manager.go
``canBeDeleted``), and only then can the cluster autoscaler find the nodes unneeded (10 min
by default). A watch's copy of the pods may lag both, so a pod counts only if a live read,
made after its node's 404, still shows it unfinished on that node; and once the JobSet
failed its pods are read live too (``pods``): the disruption the pod watch has not
delivered yet is there.
"""

from __future__ import annotations

import json

from kubernetes.client.exceptions import ApiException
from urllib3 import BaseHTTPResponse

from flows.backends.gke.watch.client import Cluster
from flows.backends.gke.watch.forbidden import Denied, denied_by
from flows.backends.gke.watch.stream import WatchSettings
from flows.common.api_objects import Obj


def unfinished(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Running", "Pending", "Unknown")


class LostNodes:
    """One GET per node (remembered), then one live GET per pod bound to a missing node."""

    def __init__(self, cluster: Cluster, namespace: str, settings: WatchSettings) -> None:
        self.cluster, self.namespace, self.settings = cluster, namespace, settings
        self._gone: dict[str, bool] = {}
        # a 403 on either read (watch/forbidden.py): the monitor ends the stage on it
        self.denied: Denied | None = None

    def outlived(self, pod: Obj, node: str) -> bool:
        """``pod`` (the watch's copy) is still there, unfinished, bound to ``node``, which
        no longer exists."""
        return self.node_gone(node) and self._still_on(pod, node)

    def node_gone(self, node: str) -> bool:
        """An error says nothing, so the node counts as present; a refusal (RBAC) is kept
        in ``denied`` besides."""
        if node not in self._gone:
            try:
                self.cluster.core.read_node(node, _request_timeout=self.settings.request_timeout)
                self._gone[node] = False
            except ApiException as exc:
                self.denied = denied_by(exc) or self.denied
                self._gone[node] = exc.status == 404
            except Exception:
                self._gone[node] = False
        return self._gone[node]

    def _still_on(self, pod: Obj, node: str) -> bool:
        """The live pod: the same one (uid), bound to ``node``, unfinished. An error says
        nothing new, so the watch's copy stands."""
        meta = pod["metadata"]
        try:  # a list by name: the flow's Role grants pods list and watch, not get
            response = self.cluster.core.list_namespaced_pod(
                self.namespace, field_selector=f"metadata.name={meta['name']}",
                _preload_content=False, _request_timeout=self.settings.request_timeout)
            items = _json_body(response).get("items") or []
        except Exception as exc:
            self.denied = denied_by(exc) or self.denied
            return True
        if not items:
            return False
        live = items[0]
        return (live.get("metadata") or {}).get("uid") == meta.get("uid") and \
            (live.get("spec") or {}).get("nodeName") == node and unfinished(live)

    def pods(self, selector: str) -> list[Obj] | None:
        """The pods ``selector`` matches as the API serves them now (the watch's copies
        may lag); None when the read fails, so the watch's copies stand."""
        try:
            response = self.cluster.core.list_namespaced_pod(
                self.namespace, label_selector=selector, _preload_content=False,
                _request_timeout=self.settings.request_timeout)
            return list(_json_body(response).get("items") or [])
        except Exception as exc:
            self.denied = denied_by(exc) or self.denied
            return None


def _json_body(response: object) -> Obj:
    """The JSON of a call made with ``_preload_content=False``: the client then returns
    urllib3's response, whatever model its annotation names."""
    assert isinstance(response, BaseHTTPResponse)
    return json.loads(response.data)
