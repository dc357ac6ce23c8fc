"""A 403 from the Kubernetes API: the flow's identity may not make a call the run needs.

Why its own diagnosis: RBAC does not change while a run waits, so a refused call refuses
again on every retry. Treated as the API failing, it is retried until a budget runs out and
the stage ends as a queue timeout or "the API kept failing", with nothing that says which
grant is missing (a queued wait whose ProvisioningRequests may not be listed never learns
that its queue failed, so the capacity chain never falls back). So every call of the backend
that gets a 403 ends the stage at once with ``FORBIDDEN_CODE``, the permission as the API
server named it, and the fix: the Role and ClusterRole the repository ships.

The API server's refusal (kubernetes staging/src/k8s.io/apiserver/pkg/endpoints/handlers/
responsewriters/errors.go ``Forbidden``/``forbiddenMessage``, wrapped by apimachinery's
``errors.NewForbidden``) is a Status with reason Forbidden and the message
``<resource>[.<group>] ["<name>"] is forbidden: User "<user>" cannot <verb> resource
"<resource>[/<subresource>]" in API group "<group>" in the namespace "<ns>"`` (or ``at the
cluster scope``), possibly followed by the authorizer's reason; the permission is read from
it. Pure.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from flows.common.failure_codes import Failure
from flows.core.failures import Diagnosis, FailureCategory

FORBIDDEN_CODE = Failure.GKE_RBAC_FORBIDDEN
RBAC_MANIFEST = "deployments/work-pool/rbac.yaml"
_USER = re.compile(r'User "system:serviceaccount:[^:"]+:(?P<account>[^"]+)"')
_DENIAL = re.compile(r'cannot (?P<verb>[a-z]+) resource "(?P<resource>[^"]+)" in API group '
                     r'"(?P<group>[^"]*)"(?: in the namespace "(?P<namespace>[^"]*)"|'
                     r' at the cluster scope)')


@dataclass(frozen=True)
class Denied:
    """One refused call: the permission it needed, as the API server wrote it."""

    verb: str
    resource: str  # plural, with "/subresource" when there is one
    group: str
    namespace: str  # "" at the cluster scope
    message: str  # the server's message, whole

    @property
    def permission(self) -> str:
        group = f'API group "{self.group}"' if self.group else "the core API group"
        where = f"in namespace {self.namespace}" if self.namespace else "at the cluster scope"
        return f"{self.verb} {self.resource} ({group}) {where}"


def status_message(body: object) -> str:
    """The ``message`` of a Status body (text or bytes), else the body as text."""
    text = body.decode(errors="replace") if isinstance(body, bytes) else str(body or "")
    try:
        return str(json.loads(text).get("message") or text)
    except (ValueError, AttributeError):
        return text


def denied_by(exc: BaseException) -> Denied | None:
    """The permission a 403 refused (an ``ApiException`` of the kubernetes client, whose
    ``status`` and ``body`` are the response's); None for any other error. A 403 whose
    message is not the API server's shape still counts, naming what is known."""
    if getattr(exc, "status", None) != 403:
        return None
    message = status_message(getattr(exc, "body", ""))
    if m := _DENIAL.search(message):
        return Denied(m["verb"], m["resource"], m["group"], m["namespace"] or "", message)
    return Denied("", "", "", "", message)


def _manifest(message: str) -> str:
    """The Role file of the account the API server names (a team's flow account's own,
    flows/backends/gke/flow_pools.py), else the shared one."""
    from flows.backends.gke.flow_pools import rbac_file_of_account, shown

    m = _USER.search(message)
    return shown(rbac_file_of_account(m["account"])) if m else RBAC_MANIFEST


def forbidden_diagnosis(what: str, denied: Denied) -> Diagnosis:
    """The stage's failure for a refused call made to ``what`` (e.g. "list the JobSet's
    ProvisioningRequests"). Not retried: the same identity is refused the same way."""
    needs = (denied.permission if denied.verb
             else "a permission (HTTP 403, its message names none)")
    secret = denied.resource == "secrets" and denied.verb == "update"
    manifest = _manifest(denied.message)
    fix = (f"apply {manifest} (kubectl apply -f {manifest}), whose Role and "
           "ClusterRole grant every call the flow makes, to the flow's service account, "
           "then run again")
    if secret:
        fix += ("; a Secret of a source the shipped Role does not name: add the name "
                "`tpurl plan PROFILE` lists under \"Secrets\" to the Role's secrets update "
                "rule")
    return Diagnosis(FailureCategory.USER_ERROR,
                     f"the flow's Kubernetes identity may not {what}: it lacks {needs}",
                     f"    {denied.message[:1000]}", fix, code=FORBIDDEN_CODE)
