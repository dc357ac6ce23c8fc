"""RBAC as the API server applies it, for the fake Kubernetes API: the request's attributes
from its method and path, the Role's rules matched against them, and the 403 a denied request
gets. Every request's (verb, API group, resource) is recorded, granted or not, so a test can
compare what the backend calls with what deployments/work-pool/rbac.yaml grants.

Upstream, what this does:
- the verb from the request (kubernetes staging/src/k8s.io/apiserver/pkg/endpoints/request/
  requestinfo.go, ``NewRequestInfo``): GET of a named object is ``get``, of a collection
  ``list``, or ``watch`` with ``?watch=true``; POST ``create``; PUT ``update``; PATCH
  ``patch``; DELETE of a named object ``delete``, of a collection ``deletecollection``; a
  path below the object's name is its subresource (``pods/log``); the name comes from the
  path only, so a create (POST to the collection) has none, and a rule with
  ``resourceNames`` never grants it; a list or watch whose
  field selector is exactly ``metadata.name=X`` is about the object X (for resourceNames);
- the rule match (kubernetes pkg/apis/rbac/v1/evaluation_helpers.go: ``VerbMatches``,
  ``APIGroupMatches``, ``ResourceMatches`` on "resource/subresource" or "*/subresource",
  ``ResourceNameMatches``): "*" matches everything, otherwise exact strings;
- the refusal (staging/src/k8s.io/apiserver/pkg/endpoints/handlers/responsewriters/
  errors.go ``forbiddenMessage``, wrapped into a Status by apimachinery's ``NewForbidden``):
  HTTP 403, reason Forbidden, ``<resource> is forbidden: User "<user>" cannot <verb> resource
  "<resource>" in API group "<group>" in the namespace "<ns>"``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

Call = tuple[str, str, str]  # (verb, API group, resource[/subresource])


@dataclass(frozen=True)
class Attributes:
    verb: str
    group: str
    resource: str  # plural, with "/subresource" when there is one
    namespace: str
    name: str = ""

    @property
    def call(self) -> Call:
        return (self.verb, self.group, self.resource)


def attributes(method: str, group: str, plural: str, namespace: str, name: str | None,
               subresource: str | None, query: dict[str, str]) -> Attributes:
    if method == "GET":
        verb = "get" if name else ("watch" if query.get("watch") in ("true", "1", "True")
                                   else "list")
    elif method == "DELETE":
        verb = "delete" if name else "deletecollection"
    else:
        verb = {"POST": "create", "PUT": "update", "PATCH": "patch"}.get(method, method.lower())
    resource = f"{plural}/{subresource}" if subresource else plural
    if not name and verb in ("list", "watch"):  # a metadata.name field selector names it
        for term in (query.get("fieldSelector") or "").split(","):
            key, _, value = term.partition("=")
            if key == "metadata.name" and value:
                name = value
    return Attributes(verb, group, resource, namespace, name or "")


def _resource_matches(rule: dict[str, Any], resource: str) -> bool:
    subresource = resource.partition("/")[2]
    return any(r == "*" or r == resource or (subresource and r == f"*/{subresource}")
               for r in rule.get("resources") or [])


def allowed(rules: list[dict[str, Any]], attrs: Attributes) -> bool:
    for rule in rules:
        if (any(v in ("*", attrs.verb) for v in rule.get("verbs") or [])
                and any(g in ("*", attrs.group) for g in rule.get("apiGroups") or [])
                and _resource_matches(rule, attrs.resource)
                and (not rule.get("resourceNames") or attrs.name in rule["resourceNames"])):
            return True
    return False


def forbidden_message(user: str, attrs: Attributes) -> str:
    head = attrs.resource.split("/")[0] + (f".{attrs.group}" if attrs.group else "")
    name = f' "{attrs.name}"' if attrs.name else ""
    return (f'{head}{name} is forbidden: User "{user}" cannot {attrs.verb} resource '
            f'"{attrs.resource}" in API group "{attrs.group}" in the namespace '
            f'"{attrs.namespace}"')


def role_rules(path: Path, name: str = "tpurl-flow", kind: str = "Role") -> list[dict[str, Any]]:
    """The rules of the Role (or ClusterRole) ``name`` in a multi-document manifest
    (rbac.yaml). A Role's rules apply only inside its namespace; a cluster-scoped object
    (a node) is reachable only through a ClusterRole bound by a ClusterRoleBinding
    (kubernetes pkg/registry/rbac/validation/rule.go, ``VisitRulesFor``: RoleBindings are
    consulted only for requests with a namespace)."""
    for doc in yaml.safe_load_all(path.read_text()):
        if doc and doc.get("kind") == kind and doc["metadata"]["name"] == name:
            return list(doc.get("rules") or [])
    raise LookupError(f"no {kind} {name} in {path}")


def granted(rules: list[dict[str, Any]]) -> set[Call]:
    """Every (verb, group, resource) the rules name (no wildcards expected in ours)."""
    return {(v, g, r) for rule in rules for v in rule.get("verbs") or []
            for g in rule.get("apiGroups") or [] for r in rule.get("resources") or []}
