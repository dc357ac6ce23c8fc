"""The one type of an object as a JSON API hands it over: a Kubernetes object (a JobSet, a
pod, an event, a node), a GKE node pool, a Kueue workload.

Its values are ``Any`` on purpose: this is the boundary where JSON from another system enters,
whose shape the API server, not this code, decides (and which changes between versions).
Code reads it with ``.get`` and checks what it finds; anything it keeps, it keeps typed.
Named once, so every module that reads such objects says the same thing about them.
"""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]


def condition(obj: Obj | None, kind: str) -> Obj | None:
    """The object's status condition of that type if its status is True."""
    return next((c for c in ((obj or {}).get("status") or {}).get("conditions") or []
                 if c.get("type") == kind and c.get("status") == "True"), None)
