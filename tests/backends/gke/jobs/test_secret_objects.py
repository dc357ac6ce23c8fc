"""The HF token: a Secret placeholder in every plan, a value only in the submit-time object."""

from __future__ import annotations

from pathlib import Path

from flows.backends.gke.jobs.manifests import render_all, to_yaml, write_manifests
from flows.backends.gke.jobs.secret_objects import secret_placeholder, secret_with_value
from flows.config import Profile
from flows.operations.plan import planned_workloads
from tests.support.profiles import fake_hf_token

CANARY = fake_hf_token("CanarySecrets")


def test_plan_never_holds_the_value(profile: Profile, tmp_path: Path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", CANARY)  # set, as during a real run: must not leak
    objects = render_all(profile, planned_workloads(profile))
    assert CANARY not in "".join(to_yaml(o) for o in objects)
    for path in write_manifests(profile, planned_workloads(profile), tmp_path):
        assert CANARY not in path.read_text()
    (secret,) = [o for o in objects if o["kind"] == "Secret"]
    assert "data" not in secret and "stringData" not in secret
    assert secret["metadata"]["annotations"]["tpurl/value-source"] == "env:HF_TOKEN"


def test_every_secret_reference_points_at_the_planned_secret(profile: Profile):
    objects = render_all(profile, planned_workloads(profile))
    (secret,) = [o for o in objects if o["kind"] == "Secret"]
    refs = [v for o in objects if o["kind"] == "JobSet"
            for v in _walk(o) if isinstance(v, dict) and "secretKeyRef" in v]
    assert len(refs) == 3  # one program container per stage
    assert {r["secretKeyRef"]["name"] for r in refs} == {secret["metadata"]["name"]}


def test_value_enters_only_the_submit_time_object(profile: Profile):
    ref = profile.model.hf_token
    assert ref is not None
    filled = secret_with_value(ref, "default", "team:a", CANARY, "value")
    assert filled["stringData"] == {"value": CANARY}
    placeholder = secret_placeholder(ref, "default", "team:a")
    assert CANARY not in str(placeholder)
    assert filled["metadata"]["name"] == placeholder["metadata"]["name"]


def _walk(node):
    yield node
    if isinstance(node, dict):
        for value in node.values():
            yield from _walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from _walk(value)
