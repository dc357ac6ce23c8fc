"""When a TPU node's VM was created, which is when the spend meter starts charging it.

Why the VM and not the node: Compute Engine bills a TPU VM for its boot too, and a GKE node
registers (its Node object's creationTimestamp) only once the VM has booted and the kubelet
has joined, so a meter that starts at registration under-charges every node by its boot. A
GKE node names its VM in ``spec.providerID``, ``gce://PROJECT/ZONE/INSTANCE`` (kubernetes'
GCE cloud provider, pkg/cloudprovider/providers/gce/gce_util.go ``splitProviderID``, now in
cloud-provider-gcp: ``^gce://([^/]+)/([^/]+)/([^/]+)$``), and Compute Engine's
``instances.get`` returns the instance's ``creationTimestamp`` in RFC 3339 (compute v1
discovery document, Instance: "[Output Only] Creation timestamp in RFC3339 text format",
beside ``lastStartTimestamp``, when it last went RUNNING). The creation is taken, not the
start: billing begins at RUNNING, seconds to minutes after creation, so charging from the
creation can only over-charge, the side a spending cap must err on.

When the VM cannot be read (a node whose providerID is not ``gce://``, an instance already
gone, the identity without ``compute.instances.get``, a network error), the node is charged
from its registration as before, and the meter's record says so (``NODE_REGISTRATION``). A
denial or an unreachable API is said once and not asked again for the run: every node would
meet the same answer. Read 2026-12-06.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from flows.backends.gke.watch.api_time import api_time
from flows.common.api_objects import Obj

VM_CREATION = "VM creation"
NODE_REGISTRATION = "node registration"
# upstream's pattern, each part narrowed to what Compute Engine names allow, since the parts
# go into a request's path: a project id (a domain-scoped one has "domain:"), a zone, an
# instance name (RFC 1035 label)
_PROVIDER_ID = re.compile(r"^gce://(?P<project>[a-z][a-z0-9.:-]{0,62})/(?P<zone>[a-z0-9-]{1,63})"
                          r"/(?P<name>[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)$")
_COMPUTE = "https://compute.googleapis.com/compute/v1"


@dataclass(frozen=True)
class InstanceRef:
    """The Compute Engine instance behind a GKE node."""

    project: str
    zone: str
    name: str


def instance_ref(node: Obj) -> InstanceRef | None:
    """The instance a node's ``spec.providerID`` names; None for another provider's node (or
    none). Pure."""
    provider = str((node.get("spec") or {}).get("providerID") or "")
    found = _PROVIDER_ID.match(provider)
    if found is None:
        return None
    return InstanceRef(found["project"], found["zone"], found["name"])


class InstanceUnreadable(Exception):
    """The instances API refused or could not be reached: no other node's VM will be read
    either (``VmCreations`` stops asking)."""


# instances.get: the instance's resource, None when it does not exist (404); raises
# InstanceUnreadable when it is refused (403) or unreachable
InstanceGet = Callable[[InstanceRef], "dict[str, Any] | None"]


class VmCreations:
    """Each node's VM creation (wall-clock Unix seconds), read once per node; after the API
    refused or failed once, no more reads (every node is then charged from registration)."""

    def __init__(self, get: InstanceGet, warn: Callable[[str], None], flow_account: str) -> None:
        """``flow_account``: the Google account id the flow runs as (the team's own,
        flow_pools.flow_account_id), which the warning names as the one to grant."""
        self.get, self.warn, self.flow_account = get, warn, flow_account
        self._known: dict[str, float | None] = {}
        self._given_up = False
        self._lock = threading.Lock()

    def created(self, node: Obj) -> float | None:
        """When the node's VM was created, or None (then its registration stands)."""
        ref = instance_ref(node)
        if ref is None:
            return None
        key = f"{ref.project}/{ref.zone}/{ref.name}"
        with self._lock:
            if key in self._known or self._given_up:
                return self._known.get(key)
        try:
            instance = self.get(ref)
        except InstanceUnreadable as exc:
            with self._lock:
                first, self._given_up = not self._given_up, True
            if first:
                self.warn(f"the TPU VMs' creation times cannot be read ({exc}); the spend meter "
                          "charges each TPU node from its registration, which comes after its "
                          "VM's boot, so it under-charges by the boot. To charge from the VM's "
                          "creation, let the identity the flow runs as read the instances: "
                          f"gcloud projects add-iam-policy-binding {ref.project} --member="
                          f"serviceAccount:{self.flow_account}@{ref.project}.iam.gserviceaccount.com"
                          " --role=roles/compute.viewer (it holds compute.instances.get)")
            return None
        stamp = api_time((instance or {}).get("creationTimestamp"))
        with self._lock:
            self._known[key] = stamp
        return stamp


class RestInstances:
    """``instances.get`` over Compute Engine's REST API, as the cluster is reached: with the
    profile's GcpCredentials block when it names one (watch/client.py), else Application
    Default Credentials; made on first use (a run whose meter never sees a GCE node asks
    nothing)."""

    def __init__(self, credentials_block: str | None = None, session: Any | None = None,
                 timeout_s: float = 10.0) -> None:
        self.block, self._session, self.timeout_s = credentials_block, session, timeout_s

    def _authorized(self) -> Any:
        if self._session is None:
            if self.block:
                import requests

                from flows.backends.gke.watch.client import gcp_token_source

                token, session = gcp_token_source(self.block), requests.Session()
                session.auth = lambda request: _bearer(request, token())
                self._session = session
            else:
                import google.auth
                from google.auth.transport.requests import AuthorizedSession

                credentials, _ = google.auth.default(
                    scopes=["https://www.googleapis.com/auth/compute.readonly"])
                self._session = AuthorizedSession(credentials)
        return self._session

    def __call__(self, ref: InstanceRef) -> dict[str, Any] | None:
        url = f"{_COMPUTE}/projects/{ref.project}/zones/{ref.zone}/instances/{ref.name}"
        try:
            response = self._authorized().get(url, timeout=self.timeout_s)
        except Exception as exc:  # no credentials, DNS, a reset: the same for every node
            raise InstanceUnreadable(type(exc).__name__) from exc
        if response.status_code == 404:
            return None
        if response.status_code >= 400:  # 403 without compute.instances.get, a 5xx
            raise InstanceUnreadable(f"HTTP {response.status_code} from instances.get")
        body = response.json()
        return body if isinstance(body, dict) else None


def _bearer(request: Any, token: str) -> Any:
    request.headers["Authorization"] = f"Bearer {token}"
    return request
