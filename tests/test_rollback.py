"""`tpurl rollback` on real files under a real output root: two promoted runs (judged by the
real promotion rule over real exports), the pointer and history after a rollback, each
refusal before any change, the dry run, and over any sequence of promotions and rollbacks a
history that only grows with the pointer equal to its last entry; the same on
fake-gcs-server. The MLflow alias is tested against a real server in
tests/integrations/test_mlflow_registry.py, the event and its message against a real
Prefect server in tests/notifications/test_notify_server.py."""

from __future__ import annotations

import ast
import re
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flows.cli import main
from flows.config import load_profile
from flows.config.profile import Profile
from flows.core.promotion_store import pointer_uris, read_history, read_promoted
from flows.core.rollback import RollbackRefused, resource_problem
from flows.core.storage import LocalStorage
from flows.flow_runs.run_creator import creator_from
from flows.operations.rollback import (
    apply_rollback,
    command_creator,
    plan_rollback,
    rolled_back_event,
)
from flows.runpage.promotion import promote_or_reject
from tests.support.promoted import judge as _judge


@pytest.fixture
def profile(tmp_path: Path) -> Profile:
    return load_profile("rehearsal", {"local.root": str(tmp_path)}, environ={})


@pytest.fixture
def two(profile: Profile, tmp_path: Path) -> Profile:
    """run-1 promoted, run-2 rejected (worse), run-3 promoted (better): the champion."""
    assert _judge(profile, tmp_path, "run-1", 0.5)
    assert not _judge(profile, tmp_path, "run-2", 0.2)
    assert _judge(profile, tmp_path, "run-3", 0.7)
    return profile


def _files(profile: Profile) -> tuple[str | None, str | None]:
    storage = LocalStorage()
    return tuple(storage.read_text(uri) for uri in pointer_uris(profile))  # type: ignore[return-value]


def test_rollback_restores_the_earlier_model_and_appends_who_when_why(
        two: Profile, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from prefect.settings import PREFECT_API_URL, temporary_settings

    # no Prefect API (a session's other tests may have set one): the rollback says no event
    with temporary_settings(restore_defaults={PREFECT_API_URL}):
        assert main(["rollback", "rehearsal", "--set", f"local.root={tmp_path}",
                     "--reason", "regressed on the canary", "--by", "oncall"]) == 0
    storage = LocalStorage()
    pointer = read_promoted(storage, two)
    history = read_history(storage, two)
    assert pointer is not None and pointer.run == "run-1" and pointer.kind == "rollback"
    assert [(m.run, m.kind) for m in history] == [
        ("run-1", "promotion"), ("run-3", "promotion"), ("run-1", "rollback")]
    assert history[-1] == pointer
    assert pointer.rollback is not None
    assert (pointer.rollback.from_run, pointer.rollback.by, pointer.rollback.reason) == (
        "run-3", "oncall", "regressed on the canary")
    assert pointer.rollback.at.endswith("+00:00")
    assert pointer.model_uri == history[0].model_uri
    assert pointer.export_digest == history[0].export_digest
    out = capsys.readouterr()
    assert "champion: run run-3" in out.out and "-> run run-1" in out.out
    assert "no tpurl.model.rolled-back event was sent" in out.err  # no API in this test


def test_the_default_target_walks_back_and_the_by_default_is_the_os_user(
        two: Profile, tmp_path: Path) -> None:
    import getpass

    assert _judge(two, tmp_path, "run-4", 0.9)
    storage = LocalStorage()
    for expected in ("run-3", "run-1"):
        plan = plan_rollback(storage, two, None, "why", getpass.getuser())
        assert plan.entry.run == expected
        apply_rollback(storage, two, plan)
    with pytest.raises(RollbackRefused, match="nothing was promoted before the champion"):
        plan_rollback(storage, two, None, "why", "me")


def test_a_dry_run_prints_the_change_and_changes_nothing(
        two: Profile, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = _files(two)
    assert main(["rollback", "rehearsal", "--set", f"local.root={tmp_path}",
                 "--to", "run-1", "--reason", "check", "--dry-run"]) == 0
    assert _files(two) == before
    out = capsys.readouterr().out
    assert out.startswith("dry run, nothing changed")
    assert "-> run run-1" in out


@pytest.mark.parametrize(("to", "words"), [
    ("run-9", "--to: run run-9 was never promoted"),
    ("run-2", "--to: run run-2 was never promoted"),  # rejected: not a candidate
    ("run-3", "--to: run run-3 is the current champion already"),
])
def test_a_bad_target_is_refused_before_any_change(
        two: Profile, tmp_path: Path, to: str, words: str, capsys: pytest.CaptureFixture[str]) -> None:
    before = _files(two)
    assert main(["rollback", "rehearsal", "--set", f"local.root={tmp_path}",
                 "--to", to, "--reason", "r"]) == 2
    err = capsys.readouterr().err
    assert words in err and "fix: name" in err and "nothing was changed" in err
    assert "promoted: run-1, run-3" in err
    assert _files(two) == before


def test_no_history_is_refused(profile: Profile, tmp_path: Path,
                              capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rollback", "rehearsal", "--set", f"local.root={tmp_path}",
                 "--reason", "r"]) == 2
    err = capsys.readouterr().err
    assert "promoted-history.json: there is no promotion history" in err and "fix:" in err


def test_an_export_gone_or_changed_is_refused(two: Profile, tmp_path: Path) -> None:
    storage = LocalStorage()
    before = _files(two)
    (tmp_path / "exports" / "run-1" / "model.safetensors").write_bytes(b"other weights")
    with pytest.raises(RollbackRefused, match="changed since it was promoted"):
        plan_rollback(storage, two, "run-1", "r", "me")
    shutil.rmtree(tmp_path / "exports" / "run-1")
    with pytest.raises(RollbackRefused, match=r"--to: run run-1's export .* is gone"):
        plan_rollback(storage, two, "run-1", "r", "me")
    assert _files(two) == before


def test_an_empty_reason_is_refused(two: Profile) -> None:
    with pytest.raises(RollbackRefused, match="--reason: empty"):
        plan_rollback(LocalStorage(), two, "run-1", "  ", "me")


VERTEX = {"promotion.register.vertex.project": "my-proj-123",
          "promotion.register.vertex.location": "us-central1",
          "promotion.register.vertex.display_name": "Qwen3 GRPO",
          "promotion.register.vertex.serving_image": "us-docker.pkg.dev/vertex-ai/v/vllm:latest"}


def test_vertex_ai_s_champion_alias_moves_back_with_the_pointer(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each promotion uploads its version and puts the alias champion on it (off the one
    before: tests/fakes/vertex_models.py refuses an alias held twice); a rollback moves it
    to the restored run's version; a run never uploaded there is refused before any change."""
    from flows.integrations import vertex_registry
    from flows.integrations.judged_model import JudgedModel
    from flows.integrations.register import register_judged
    from tests.fakes.vertex_models import VertexModels

    service = VertexModels()
    monkeypatch.setattr(vertex_registry, "authorized_session", lambda: service)
    monkeypatch.setattr(vertex_registry, "POLL_S", 0.0)
    # run-0 was promoted before the profile registered in Vertex AI: never uploaded there
    assert _judge(load_profile("rehearsal", {"local.root": str(tmp_path)}, environ={}),
                  tmp_path, "run-0", 0.3)
    profile = load_profile("rehearsal", {"local.root": str(tmp_path), **VERTEX}, environ={})
    for run, mean in (("run-1", 0.5), ("run-3", 0.7)):
        assert _judge(profile, tmp_path, run, mean)
        pointer = read_promoted(LocalStorage(), profile)
        assert pointer is not None
        model = JudgedModel(profile="rehearsal", run=run, flow_run_id=f"flow-{run}",
                            export_uri=pointer.model_uri, promoted=True, reason="better",
                            scores={"mean_reward": mean}, base_scores={"mean_reward": 0.1})
        assert register_judged(profile, model, LocalStorage(), print, delays_s=(0.0,))
    name = "projects/my-proj-123/locations/us-central1/models/qwen3_grpo"
    assert service.get(f"https://x/v1/{name}@champion").json()["versionId"] == "2"
    before = _files(profile)
    with pytest.raises(RollbackRefused, match=r"promotion\.register\.vertex: .* run-0"):
        plan_rollback(LocalStorage(), profile, "run-0", "r", "me")
    assert _files(profile) == before
    plan = plan_rollback(LocalStorage(), profile, "run-1", "canary regressed", "oncall")
    assert plan.vertex_version == f"{name}@1"
    assert f"Vertex AI alias champion -> {name}@1" in plan.lines()
    apply_rollback(LocalStorage(), profile, plan)
    assert service.get(f"https://x/v1/{name}@champion").json()["versionId"] == "1"
    assert service.get(f"https://x/v1/{name}@2").json()["versionAliases"] == []
    assert read_promoted(LocalStorage(), profile).run == "run-1"  # type: ignore[union-attr]


def test_the_event_payload_is_the_catalogued_one(two: Profile) -> None:
    plan = plan_rollback(LocalStorage(), two, "run-1", "r", "me")
    body = rolled_back_event("rehearsal", plan)
    assert body["event"] == "tpurl.model.rolled-back"
    assert body["resource"]["prefect.resource.id"] == "tpurl.model.rehearsal"
    assert body["payload"] == {"from_run": "run-3", "to_run": "run-1",
                               "model_uri": plan.entry.model_uri, "by": "me", "reason": "r",
                               "at": plan.entry.rollback.at,  # type: ignore[union-attr]
                               "verified": ""}


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(st.one_of(st.floats(0.0, 1.0), st.none()), min_size=1, max_size=8))
def test_any_sequence_only_grows_the_history_and_the_pointer_is_its_last_entry(
        tmp_path_factory: pytest.TempPathFactory, steps: list[float | None]) -> None:
    """A float: a run judged with that mean reward; None: a rollback to the default target
    (refused when there is none, which changes nothing)."""
    root = tmp_path_factory.mktemp("seq")
    profile = load_profile("rehearsal", {"local.root": str(root)}, environ={})
    storage = LocalStorage()
    for n, step in enumerate(steps):
        before = read_history(storage, profile)
        if step is None:
            try:
                apply_rollback(storage, profile, plan_rollback(storage, profile, None, "r", "me"))
            except RollbackRefused:
                assert read_history(storage, profile) == before
                continue
        else:
            _judge(profile, root, f"run-{n}", step)
        history = read_history(storage, profile)
        assert history[:len(before)] == before  # appended to, never rewritten
        assert len(history) - len(before) in (0, 1)
        if history:
            assert read_promoted(storage, profile) == history[-1]


def test_the_rollback_flow_rolls_back_only_while_the_regressed_run_is_the_champion(
        two: Profile, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The automation's flow (called as its function: the trigger and deployment are
    checked in tests/test_prefect_yaml.py): a stale regression changes nothing."""
    from flows.operations.rollback_flow import rollback_flow

    monkeypatch.setenv("TPURL_LOCAL__ROOT", str(tmp_path))
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    own = {"prefect.resource.id": "tpurl.model.rehearsal", "tpurl.profile": "rehearsal"}
    before = _files(two)
    with pytest.raises(RollbackRefused, match="regressed_run: run run-1 is not the champion"):
        rollback_flow.fn("rehearsal", "canary", regressed_run="run-1", event_resource=own)
    with pytest.raises(RollbackRefused, match="regressed_run: empty"):
        rollback_flow.fn("rehearsal", "canary", regressed_run="", event_resource=own)
    with pytest.raises(RollbackRefused, match=r"event_resource: names model tpurl\.model\.other"):
        rollback_flow.fn("rehearsal", "canary", regressed_run="run-3", event_resource={
            "prefect.resource.id": "tpurl.model.other", "tpurl.profile": "other"})
    assert _files(two) == before
    lines = rollback_flow.fn("rehearsal", "canary", regressed_run="run-3", event_resource=own)
    assert "  -> run run-1" in "\n".join(lines)
    pointer = read_promoted(LocalStorage(), two)
    assert pointer is not None and pointer.rollback is not None
    # called in-process, no flow run records a creator: nobody is named
    assert (pointer.run, pointer.rollback.by) == ("run-1", "unknown")
    assert pointer.rollback.verified.startswith("no creator recorded")


def test_a_promotion_between_plan_and_apply_stops_the_rollback(two: Profile,
                                                              tmp_path: Path) -> None:
    storage = LocalStorage()
    plan = plan_rollback(storage, two, "run-1", "r", "me")
    assert _judge(two, tmp_path, "run-5", 0.95)
    after = _files(two)
    with pytest.raises(RollbackRefused, match=r"promoted-history\.json: it changed since"):
        apply_rollback(storage, two, plan)
    assert _files(two) == after


def test_a_rollback_on_gcs_restores_the_pointer_and_refuses_a_deleted_export(store) -> None:
    """fake-gcs-server: the same rollback over a bucket, and an export whose objects were
    deleted refused before any change."""
    from tests.support.gcs import GCS_BUCKET
    from tests.support.profiles import TUTORIAL, TUTORIAL_REQUIRED
    from tests.support.scores import summary

    gke = load_profile(TUTORIAL, {**TUTORIAL_REQUIRED, "gke.bucket": GCS_BUCKET,
                                  "eval.batches": "2"}, environ={})
    for n, mean in ((1, 0.5), (2, 0.7), (3, 0.9)):
        export = f"gs://{GCS_BUCKET}/qwen3/hf/export-{n}"
        for name, data in (("model.safetensors", f"weights {n}"), ("config.json", "{}")):
            store.write_text(f"{export}/{name}", data)
        evaluation = {"trained": summary(mean).model_dump(), "base": summary(0.1).model_dump()}
        arts = {"hf_export": export, "trained_checkpoint": f"gs://{GCS_BUCKET}/ckpt"}
        decision, _ = promote_or_reject(store, gke, f"run-{n}", evaluation, arts, None, "k", "s")
        assert decision.promoted
    store.remove_tree(f"gs://{GCS_BUCKET}/qwen3/hf/export-2")
    before = [store.read_text(uri) for uri in pointer_uris(gke)]
    with pytest.raises(RollbackRefused, match=r"run run-2.s export .* is gone"):
        plan_rollback(store, gke, None, "r", "me")
    assert [store.read_text(uri) for uri in pointer_uris(gke)] == before
    apply_rollback(store, gke, plan_rollback(store, gke, "run-1", "r", "me"))
    pointer = read_promoted(store, gke)
    history = read_history(store, gke)
    assert pointer is not None and pointer.run == "run-1" and history[-1] == pointer
    assert [m.kind for m in history] == ["promotion"] * 3 + ["rollback"]


def test_a_rollback_is_not_counted_as_a_promotion_in_the_month_costs(
        two: Profile, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from flows.operations.costs import promoted_in

    monkeypatch.setenv("TPURL_LOCAL__ROOT", str(tmp_path))
    month = read_history(LocalStorage(), two)[0].promoted_at[:7]
    assert promoted_in("rehearsal", month) == 2
    apply_rollback(LocalStorage(), two, plan_rollback(LocalStorage(), two, "run-1", "r", "me"))
    assert promoted_in("rehearsal", month) == 2


@pytest.mark.parametrize("claimed", ["", " ", "run-1", "run-2"])
def test_a_regression_not_naming_the_champion_is_refused_before_any_change(
        two: Profile, claimed: str) -> None:
    """The automation's ``regressed_run`` is the event's payload ``run``: empty (missing in
    the event) or another run than the champion (run-3) rolls nothing back."""
    before = _files(two)
    with pytest.raises(RollbackRefused, match="regressed_run: ") as refused:
        plan_rollback(LocalStorage(), two, None, "r", "me", regressed_run=claimed)
    assert "fix: " in str(refused.value)
    if not claimed.strip():
        assert "regressed_run: empty" in str(refused.value)
        assert "the champion is run run-3" in str(refused.value)
    assert _files(two) == before
    plan = plan_rollback(LocalStorage(), two, None, "r", "me", regressed_run="run-3")
    assert plan.entry.run == "run-1"  # run-2 was rejected: the promotion before run-3


@pytest.mark.parametrize("resource", [
    None, {},
    {"prefect.resource.id": "tpurl.model.team-b", "tpurl.profile": "team-b"},
    {"prefect.resource.id": "tpurl.model.team-a", "tpurl.profile": "team-b"},
    {"prefect.resource.id": "tpurl.model.team-b", "tpurl.profile": "team-a"},
    {"prefect.resource.id": "tpurl.model.team-a"},
    {"prefect.resource.id": "tpurl.model.team-a", "tpurl.profile": ""},
])
def test_a_regression_of_another_model_is_refused(resource) -> None:
    with pytest.raises(RollbackRefused, match=r"event_resource: names model .* not this "
                       r"deployment.s tpurl\.model\.team-a") as refused:
        resource_problem("team-a", resource)
    assert "fix: post the regression with resource" in str(refused.value)


def test_following_the_resource_fix_lets_the_regression_through() -> None:
    """The fix's resource, as the message prints it, is accepted (extra labels are the
    emitter's own)."""
    with pytest.raises(RollbackRefused) as refused:
        resource_problem("team-a", {"prefect.resource.id": "tpurl.model.team-b"})
    printed = re.search(r"resource (\{.*?\}) for this profile", str(refused.value))
    assert printed is not None
    resource = ast.literal_eval(printed[1])
    resource_problem("team-a", resource)
    resource_problem("team-a", {**resource, "prefect.resource.name": "team-a model"})


@pytest.mark.parametrize(("by", "named", "how"), [
    (None, "alice", "the OS account that ran `tpurl rollback`"),
    ("alice", "alice", "the OS account that ran `tpurl rollback`"),
    ("oncall", "oncall", "given with --by, not verified (`tpurl rollback` ran as OS account "
                         "alice)"),
])
def test_the_command_says_whether_who_rolled_back_is_the_os_account_or_a_claim(
        by, named, how) -> None:
    found = command_creator(by, "alice")
    assert (found.by, found.verified) == (named, how)


@pytest.mark.parametrize(("created_by", "by", "words"), [
    (None, "unknown", "no creator recorded"),
    ({"id": None, "type": None, "display_value": None}, "unknown", "no creator recorded"),
    ({"id": "8a3c0f4e-0000-4000-8000-000000000001", "type": "AUTOMATION",
      "display_value": "team-a: champion regressed"}, "automation 'team-a: champion regressed'",
     "created_by as the Prefect API recorded it (automation 8a3c0f4e-"),
    ({"id": "8a3c0f4e-0000-4000-8000-000000000002", "type": "USER",
      "display_value": "alice@example.com"}, "alice@example.com",
     "created_by as the Prefect API recorded it (user 8a3c0f4e-"),
])
def test_who_created_a_flow_run_is_prefects_record_or_nobody(created_by, by, words) -> None:
    found = creator_from(created_by)
    assert found.by == by and words in found.verified
