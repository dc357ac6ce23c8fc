"""Secrets as Kubernetes objects: planned without a value, filled only at submit time.

Two functions on purpose. ``secret_placeholder`` is what plans, golden files and dry runs
see: the object's identity (name, labels, where the value comes from) and no data at all.
``secret_with_value`` is the only place a value enters an object; the backend calls it just
before create/replace and never logs, persists or returns its result.
"""

from __future__ import annotations

from typing import Any

from flows.backends.gke.jobs.naming import secret_name
from flows.config.profile import SecretRef

MANAGED_BY = "tpurl"
SOURCE_ANNOTATION = "tpurl/value-source"


def secret_placeholder(ref: SecretRef, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": secret_name(ref.describe()),
            "namespace": namespace,
            "labels": {"app.kubernetes.io/managed-by": MANAGED_BY},
            "annotations": {SOURCE_ANNOTATION: ref.describe()},
        },
        "type": "Opaque",
    }


def secret_with_value(ref: SecretRef, namespace: str, value: str, key: str) -> dict[str, Any]:
    """The Secret to create or replace at submit time; holds the value (never log this)."""
    obj = secret_placeholder(ref, namespace)
    obj["stringData"] = {key: value}
    return obj


def secret_env_var(name: str, ref: SecretRef, key: str) -> dict[str, Any]:
    """An env var read from the Secret: the container's shell sees $NAME, the object does not."""
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": secret_name(ref.describe()),
                                                        "key": key}}}
