"""Secrets as Kubernetes objects: planned without a value, filled only at submit time.

Two functions on purpose. ``secret_placeholder`` is what plans, golden files and dry runs
see: the object's identity (name, labels, where the value comes from) and no data at all.
``secret_with_value`` is the only place a value enters an object; the backend calls it just
before create/replace and never logs, persists or returns its result.

Every function takes the Secret's owner (``owner_of``): the profile's team, or the
profile when it is in no team. Several teams share one namespace; a Secret named by its
source alone would be one object for all of them, each team's run replacing the value the
others' queued and restarting pods read at start.
"""

from __future__ import annotations

from typing import Any

from flows.backends.gke.jobs.naming import secret_name
from flows.config.profile import SecretRef
from flows.config.teams import Team

MANAGED_BY = "tpurl"
SOURCE_ANNOTATION = "tpurl/value-source"


def owner_of(profile: str, team: Team | None) -> str:
    """Whose Secrets a run of ``profile`` writes (pure): ``team:NAME`` of the run's team,
    else ``profile:NAME``. A team's profiles share them (one team, one token); no two
    teams, and no team and a lone profile, do."""
    return f"team:{team.name}" if team is not None else f"profile:{profile}"


def secret_placeholder(ref: SecretRef, namespace: str, owner: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": secret_name(owner, ref.describe()),
            "namespace": namespace,
            "labels": {"app.kubernetes.io/managed-by": MANAGED_BY},
            "annotations": {SOURCE_ANNOTATION: ref.describe()},
        },
        "type": "Opaque",
    }


def secret_with_value(ref: SecretRef, namespace: str, owner: str, value: str,
                      key: str) -> dict[str, Any]:
    """The Secret to create or replace at submit time; holds the value (never log this)."""
    obj = secret_placeholder(ref, namespace, owner)
    obj["stringData"] = {key: value}
    return obj


def secret_env_var(name: str, ref: SecretRef, owner: str, key: str) -> dict[str, Any]:
    """An env var read from the Secret: the container's shell sees $NAME, the object does not."""
    return {"name": name, "valueFrom": {"secretKeyRef": {
        "name": secret_name(owner, ref.describe()), "key": key}}}
