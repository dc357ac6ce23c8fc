"""Shared state of the fake cloud: one JSON file that the fake executables and the fake
GoogleApis read and write, so a fake ``gcloud projects add-iam-policy-binding`` is visible to
the next ``project_iam_policy`` read, as on the real cloud. Standard library only (the fake
executables import it)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

ENV = "TPURL_FAKE_CLOUD"


def home() -> Path:
    return Path(os.environ[ENV])


def load() -> dict:
    path = home() / "state.json"
    return json.loads(path.read_text()) if path.is_file() else {
        "clusters": {}, "project_policy": {"bindings": []}, "bucket_policies": {}}


def save(state: dict) -> None:
    (home() / "state.json").write_text(json.dumps(state, indent=2))


def record(tool: str, argv: list[str]) -> None:
    with (home() / "calls.jsonl").open("a") as f:
        f.write(json.dumps({"tool": tool, "argv": argv, "cwd": os.getcwd()}) + "\n")


def take_cue(key: str) -> str | None:
    """Pop the next scripted outcome for ``key`` (e.g. 'gcluster deploy'), if any."""
    path = home() / "cues.json"
    cues = json.loads(path.read_text()) if path.is_file() else {}
    queue = cues.get(key) or []
    if not queue:
        return None
    cue = queue.pop(0)
    path.write_text(json.dumps(cues))
    return cue


def add_binding(policy: dict, member: str, role: str, condition: dict | None = None) -> None:
    """IAM's add-binding: a binding is one (role, condition) pair (a condition is its
    expression, title and description), so the member joins the binding of that role with
    the same condition, or a new one (IAM "Policy" reference: each binding's role and
    condition; a policy with conditions is version 3)."""
    for binding in policy["bindings"]:
        if binding["role"] == role and binding.get("condition") == condition:
            if member not in binding["members"]:
                binding["members"].append(member)
            return
    policy["bindings"].append({"role": role, "members": [member],
                               **({"condition": condition} if condition else {})})
    if condition:
        policy["version"] = 3


def stamp_grant(state: dict, member: str, role: str) -> None:
    """When a binding was made (tests/fakes/cloud/iam_propagation.py: the fake's IAM
    enforces it only ``delay_s`` later); kept beside the policies, not in them."""
    state.setdefault("grant_times", {})[f"{member} {role}"] = time.time()
