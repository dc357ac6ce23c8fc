"""Two teams on one cluster and one namespace: each team's run writes and mounts Secrets of
its own, so a second team's token never replaces the first's, and a queued or restarted pod
of one team never starts with the other's token (flows/backends/gke/jobs/naming.py
``secret_name`` keys a Secret by its owner, the profile's team or else the profile, as well
as its source)."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flows.backends.gke.jobs.secret_objects import secret_env_var, secret_with_value
from flows.config.profile import SecretRef
from tests.backends.gke.test_rbac import tracking_overrides, wandb_key
from tests.fakes.gke_backend import run_stage
from tests.fakes.kube_api import FakeApiServer, FakeKube
from tests.fakes.kube_api.scenarios import admit, scenario, start, succeed
from tests.support.profiles import fake_hf_token, smoke_profile, tutorial_profile

RUN = [(0.05, admit), (0.05, start), (0.1, succeed)]


def _mounted(kube: FakeKube, skip: frozenset[str] = frozenset()) -> tuple[set[str], set[str]]:
    """(the JobSets' names but ``skip``, the Secrets their pods read their environment from)."""
    jobsets = {j["metadata"]["name"]: j for j in kube.find("jobsets")}
    names: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if ref := node.get("secretKeyRef"):
                names.add(ref["name"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)
    for name, jobset in jobsets.items():
        if name not in skip:
            walk(jobset["spec"])
    return set(jobsets) - skip, names


def _values(kube: FakeKube, names: set[str]) -> dict[str, tuple[str, str]]:
    """Each Secret's value and resourceVersion."""
    out = {}
    for name in names:
        secret = kube.get("secrets", "default", name)
        (value,) = secret["data"].values()
        out[name] = (base64.b64decode(value).decode(), secret["metadata"]["resourceVersion"])
    return out


def test_a_second_teams_run_neither_replaces_nor_mounts_the_first_teams_secrets(
        two_teams: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Team A's train stage, then team B's with another HF token and W&B key, both reading
    the same sources (env:HF_TOKEN, env:WANDB_API_KEY): A's Secrets keep A's values and
    resourceVersions (never replaced), and B's pods read none of them."""
    a = tutorial_profile(**tracking_overrides())
    b = smoke_profile(**tracking_overrides())
    with FakeApiServer(FakeKube()) as srv:
        monkeypatch.setenv("HF_TOKEN", fake_hf_token("TeamA"))
        monkeypatch.setenv("WANDB_API_KEY", wandb_key("team-a"))
        scenario(srv.kube, RUN)
        first, logger, _, _ = run_stage(srv, "train", tmp_path / "a", profile=a)
        assert not isinstance(first, Exception), (first, logger.lines)
        a_jobsets, a_secrets = _mounted(srv.kube)
        assert len(a_secrets) == 2, a_secrets  # the HF token and the W&B key
        before = _values(srv.kube, a_secrets)
        assert {v for v, _ in before.values()} == {fake_hf_token("TeamA"), wandb_key("team-a")}

        monkeypatch.setenv("HF_TOKEN", fake_hf_token("TeamB"))
        monkeypatch.setenv("WANDB_API_KEY", wandb_key("team-b"))
        scenario(srv.kube, RUN)
        second, logger, _, _ = run_stage(srv, "train", tmp_path / "b", profile=b)
        assert not isinstance(second, Exception), (second, logger.lines)
        b_jobsets, b_secrets = _mounted(srv.kube, skip=frozenset(a_jobsets))
        assert b_jobsets, "team B's run submitted no JobSet"
        assert _values(srv.kube, a_secrets) == before, "team B's run replaced team A's Secret"
        assert not b_secrets & a_secrets, f"team B's pods read team A's {b_secrets & a_secrets}"
        assert {v for v, _ in _values(srv.kube, b_secrets).values()} == {
            fake_hf_token("TeamB"), wandb_key("team-b")}


def test_the_plan_lists_the_teams_own_secrets_and_that_the_role_must_name_them(
        two_teams: None) -> None:
    """`tpurl plan` of a team the shipped Role does not know: its own Secret names (not the
    tutorial team's, which the Role names), each with the fix that adds it to the Role."""
    from flows.backends.gke.jobs.naming import secret_name
    from flows.backends.gke.secret_grants import shipped_replaceable
    from flows.operations.plan import build_plan, render_text

    profile = smoke_profile()
    text = render_text(profile, build_plan(profile))
    ours = secret_name("team:team-b", "env:HF_TOKEN")
    assert "Secrets the run writes in namespace default, team:team-b's own" in text, text
    assert (f"  {ours}: env:HF_TOKEN, written by convert, train, export; NOT in the Role's "
            f"secrets update rule: add {ours} to its resourceNames") in text, text
    allowed = shipped_replaceable("team:tutorial")
    assert allowed is not None and secret_name("team:tutorial", "env:HF_TOKEN") in allowed
    assert not any(name in text for name in allowed), "the plan names another owner's Secret"


OWNERS = ("team:a", "team:b", "profile:a", "profile:team-a")
SOURCES = (SecretRef(env="HF_TOKEN"), SecretRef(env="WANDB_API_KEY"),
           SecretRef(secret_block="hf-token"))


@given(st.lists(st.tuples(st.sampled_from(OWNERS), st.sampled_from(range(len(SOURCES))),
                          st.integers(0, 3)), max_size=12))
def test_in_any_order_of_writes_each_owner_mounts_its_own_last_value(writes):
    """Runs of several owners (two teams, a lone profile named like one of them) write
    their sources in any order: the Secret each owner's pods mount holds that owner's last
    value of that source, whatever the others wrote since. Pure: the namespace as a dict of
    name to value, written as the backend writes (create or replace by name)."""
    namespace: dict[str, str] = {}
    last: dict[tuple[str, int], str] = {}
    for owner, source, value in writes:
        text = f"{owner}-{source}-{value}"
        body = secret_with_value(SOURCES[source], "default", owner, text, "value")
        namespace[body["metadata"]["name"]] = body["stringData"]["value"]
        last[(owner, source)] = text
        for (who, which), expected in last.items():
            mounted = secret_env_var("X", SOURCES[which], who, "value")
            assert namespace[mounted["valueFrom"]["secretKeyRef"]["name"]] == expected
