"""Compute Engine's ``instances.get`` for the fake cluster's TPU nodes (the seam of
flows/backends/gke/watch/vm_created.py).

What it follows: the compute v1 discovery document's Instance (``creationTimestamp``:
"[Output Only] Creation timestamp in RFC3339 text format", written by the API with
milliseconds and the zone's offset, e.g. ``2026-12-06T08:00:00.123-08:00``; ``name``;
``zone`` as a URL); a missing instance is a 404 (None here), a caller without
``compute.instances.get`` a 403 (``denied``). GKE names a node as its VM and says which in
``spec.providerID`` (gce://PROJECT/ZONE/NAME), so the instance is the node of that name in
that zone; its VM was created ``boot_s`` before the node registered: a TPU VM boots, then
the kubelet joins (a plausible two minutes by default; the first real run measures it from
the billing export)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from flows.backends.gke.watch.api_time import api_time
from flows.backends.gke.watch.vm_created import InstanceRef, InstanceUnreadable
from tests.fakes.kube_api.store import ApiError, FakeKube

ZONE_LABEL = "topology.kubernetes.io/zone"
PACIFIC = timezone(timedelta(hours=-8))  # the offset the API writes for us-* zones' times


class FakeInstances:
    """``instances.get`` over the fake cluster's nodes; ``calls`` records every request."""

    def __init__(self, kube: FakeKube, boot_s: float = 120.0, denied: bool = False) -> None:
        self.kube, self.boot_s, self.denied = kube, boot_s, denied
        self.calls: list[InstanceRef] = []

    def __call__(self, ref: InstanceRef) -> dict[str, Any] | None:
        self.calls.append(ref)
        if self.denied:
            raise InstanceUnreadable("HTTP 403 from instances.get")
        try:
            node = self.kube.get("nodes", "", ref.name)
        except ApiError:
            return None
        meta = node.get("metadata") or {}
        registered = api_time(meta.get("creationTimestamp"))
        if registered is None or (meta.get("labels") or {}).get(ZONE_LABEL) != ref.zone:
            return None
        created = datetime.fromtimestamp(registered - self.boot_s, PACIFIC)
        return {"kind": "compute#instance", "name": ref.name,
                "zone": f"https://www.googleapis.com/compute/v1/projects/{ref.project}/zones/"
                        f"{ref.zone}",
                "creationTimestamp": created.isoformat(timespec="milliseconds")}
