"""RBAC as the API server applies it, for the fake Kubernetes API: the request's attributes
from its method and path, the Role's and ClusterRole's rules matched against them, and the
403 a denied request gets. Every request's (API group, resource[/subresource], verb) is
recorded, granted or not, so a test can compare what the backend calls with what
deployments/work-pool/rbac.yaml grants.

Upstream, what this does:
- the verb from the request (kubernetes staging/src/k8s.io/apiserver/pkg/endpoints/request/
  requestinfo.go, ``NewRequestInfo``): GET of a named object is ``get``, of a collection
  ``list``, or ``watch`` with ``?watch=true``; POST ``create``; PUT ``update``; PATCH
  ``patch``; DELETE of a named object ``delete``, of a collection ``deletecollection``; a
  path below the object's name is its subresource (``pods/log``); the name comes from the
  path only, so a create (POST to the collection) has none, and a rule with
  ``resourceNames`` never grants it; a list or watch whose
  field selector is exactly ``metadata.name=X`` is about the object X (for resourceNames);
- which rules apply (kubernetes pkg/registry/rbac/validation/rule.go ``VisitRulesFor``):
  those of the ClusterRoles bound by ClusterRoleBindings for every request, then, for a
  request in a namespace, those of the Roles bound in that namespace;
- the rule match (kubernetes plugin/pkg/auth/authorizer/rbac/rbac.go ``RuleAllows``, with
  pkg/apis/rbac/v1/evaluation_helpers.go ``VerbMatches``, ``APIGroupMatches``,
  ``ResourceMatches`` on "resource/subresource" or "*/subresource", ``ResourceNameMatches``):
  "*" matches every verb, group and resource, otherwise exact strings; an empty
  ``resourceNames`` matches every name, a non-empty one only the names it lists (so never
  the empty name of a create, list, watch or deletecollection);
- the refusal (staging/src/k8s.io/apiserver/pkg/endpoints/handlers/responsewriters/
  errors.go ``Forbidden`` and ``forbiddenMessage``, wrapped by apimachinery's
  pkg/api/errors ``NewForbidden``): HTTP 403, a Status with reason Forbidden, details
  {name, group, kind: the resource}, and the message ``<resource>[.<group>] ["<name>"] is
  forbidden: User "<user>" cannot <verb> resource "<resource>[/<sub>]" in API group
  "<group>" in the namespace "<ns>"`` (``at the cluster scope`` without a namespace). The
  RBAC authorizer gives no reason when no rule matched (rbac.go ``Authorize`` returns
  NoOpinion with an empty reason unless a binding's role could not be read), so nothing
  follows the message.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.fakes.kube_api.store import ApiError

Call = tuple[str, str, str]  # (API group, resource[/subresource], verb)


@dataclass(frozen=True)
class Attributes:
    verb: str
    group: str
    resource: str  # plural, with "/subresource" when there is one
    namespace: str
    name: str = ""

    @property
    def call(self) -> Call:
        return (self.group, self.resource, self.verb)

    @property
    def subresource(self) -> str:
        return self.resource.partition("/")[2]


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


def verb_matches(rule: dict[str, Any], verb: str) -> bool:
    return any(v in ("*", verb) for v in rule.get("verbs") or [])


def api_group_matches(rule: dict[str, Any], group: str) -> bool:
    return any(g in ("*", group) for g in rule.get("apiGroups") or [])


def resource_matches(rule: dict[str, Any], combined: str, subresource: str) -> bool:
    return any(r == "*" or r == combined or (subresource and r == f"*/{subresource}")
               for r in rule.get("resources") or [])


def resource_name_matches(rule: dict[str, Any], name: str) -> bool:
    names = rule.get("resourceNames") or []
    return not names or name in names


def rule_allows(rule: dict[str, Any], attrs: Attributes) -> bool:
    return (verb_matches(rule, attrs.verb) and api_group_matches(rule, attrs.group)
            and resource_matches(rule, attrs.resource, attrs.subresource)
            and resource_name_matches(rule, attrs.name))


def allowed(rules: list[dict[str, Any]], attrs: Attributes) -> bool:
    return any(rule_allows(rule, attrs) for rule in rules)


def forbidden_message(user: str, attrs: Attributes) -> str:
    head = attrs.resource.split("/")[0] + (f".{attrs.group}" if attrs.group else "")
    name = f' "{attrs.name}"' if attrs.name else ""
    where = (f'in the namespace "{attrs.namespace}"' if attrs.namespace
             else "at the cluster scope")
    return (f'{head}{name} is forbidden: User "{user}" cannot {attrs.verb} resource '
            f'"{attrs.resource}" in API group "{attrs.group}" {where}')


def forbidden(user: str, attrs: Attributes) -> ApiError:
    details: dict[str, Any] = {"group": attrs.group, "kind": attrs.resource.split("/")[0]}
    if attrs.name:
        details["name"] = attrs.name
    return ApiError(403, "Forbidden", forbidden_message(user, attrs), details)


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
    """Every (group, resource, verb) the rules name (no wildcards expected in ours)."""
    return {(g, r, v) for rule in rules for v in rule.get("verbs") or []
            for g in rule.get("apiGroups") or [] for r in rule.get("resources") or []}
