"""Whether a Cloud Storage bucket's IAM policy lets a member do one thing, conditions
included, for tests of the grants `tpurl flow-identity` prints (tests/fakes/cloud/bin/gcloud
records them).

What IAM evaluates, from its documentation ("Attribute reference for IAM Conditions",
"Overview of IAM Conditions"), for Cloud Storage:
- a binding grants its role's permissions when it has no condition, or its CEL expression
  is true for the request;
- an object's request is made on ``resource.type`` ``storage.googleapis.com/Object`` named
  ``projects/_/buckets/BUCKET/objects/NAME``; ``storage.objects.list`` is checked on the
  bucket (``storage.googleapis.com/Bucket``, ``projects/_/buckets/BUCKET``) and its prefix
  is the API attribute ``storage.googleapis.com/objectListPrefix``, read with
  ``api.getAttribute(NAME, DEFAULT)`` (the default when the request sets none);
- the predefined roles' storage permissions (Cloud Storage, "IAM roles for Cloud Storage"),
  the ones these tests grant.
Expressions are evaluated by cel-python, as IAM evaluates CEL.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import celpy

ROLE_PERMISSIONS = {
    "roles/storage.objectViewer": frozenset({"storage.objects.get", "storage.objects.list"}),
    "roles/storage.objectCreator": frozenset({"storage.objects.create"}),
    "roles/storage.objectAdmin": frozenset({"storage.objects.get", "storage.objects.list",
                                            "storage.objects.create",
                                            "storage.objects.delete"}),
}
LIST_PREFIX = "storage.googleapis.com/objectListPrefix"
_ENV = celpy.Environment()


def _get_attribute(api: Any, name: Any, default: Any) -> Any:
    return api.get(name, default)


@cache
def _program(expression: str) -> Any:
    return _ENV.program(_ENV.compile(expression), functions={"getAttribute": _get_attribute})


def allowed(policy: dict[str, Any], member: str, permission: str, bucket: str,
            object_name: str | None = None, list_prefix: str = "") -> bool:
    """Whether ``member`` holds ``permission`` on the object ``object_name`` of ``bucket``
    (``storage.objects.get`` and ``create``), or on the bucket to list ``list_prefix``
    (``storage.objects.list``), under ``policy`` (a bucket's IAM policy)."""
    if permission == "storage.objects.list":
        resource = {"type": "storage.googleapis.com/Bucket", "name": f"projects/_/buckets/{bucket}"}
        api = {LIST_PREFIX: list_prefix} if list_prefix else {}
    else:
        assert object_name is not None, "an object's permission names the object"
        resource = {"type": "storage.googleapis.com/Object",
                    "name": f"projects/_/buckets/{bucket}/objects/{object_name}"}
        api = {}
    activation = {"resource": celpy.json_to_cel(resource), "api": celpy.json_to_cel(api)}
    for binding in policy.get("bindings") or []:
        if member not in binding["members"] or \
                permission not in ROLE_PERMISSIONS.get(binding["role"], frozenset()):
            continue
        condition = binding.get("condition")
        if condition is None or bool(_program(condition["expression"]).evaluate(activation)):
            return True
    return False
