"""A held promotion on real files under a real output root: a run that passes its rule while
a holding detector fired leaves the pointer alone and waits; `tpurl promote --clear` promotes
it with who, when and why in the promotion history; each refusal comes before any change;
`tpurl status`'s lines and the team view list the held run; a warn-only finding holds
nothing. The event body is checked against the catalogue (the notify automation's rendering
of catalogued events is tested against a real Prefect server in tests/notifications/)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flows.cli import main
from flows.config import load_profile
from flows.config.profile import Profile
from flows.core.promotion_store import pointer_uris, read_history, read_promoted
from flows.core.storage import LocalStorage
from flows.health import sentinel
from flows.health.holds import HoldRefused, apply_clear, held_lines, held_runs, plan_clear
from flows.operations.promote import cleared_event
from flows.operations.team_view import champion_lines, champion_of
from flows.runpage.promotion import promote_or_reject, promoted_lines
from tests.support import health_streams as hs
from tests.support.promoted import export
from tests.support.promoted import judge as judge_plain
from tests.support.scores import summary


@pytest.fixture
def profile(tmp_path: Path) -> Profile:
    return load_profile("rehearsal", {"local.root": str(tmp_path)}, environ={})


def _collapsed() -> list[dict[str, object]]:
    """The constant reward's stream, judged under the profile's default policy (hold)."""
    steps = [{"step": s, "rewards/train/mean": 1.0, "rewards/train/min": 1.0,
              "rewards/train/max": 1.0} for s in range(2)]
    return sentinel.after_training(steps, load_profile("rehearsal", environ={}).health)


def _judge(profile: Profile, root: Path, run: str, mean: float,
           holding: list[dict[str, object]]) -> tuple[bool, bool]:
    evaluation = {"trained": summary(mean).model_dump(), "base": summary(0.1).model_dump()}
    artifacts = {"hf_export": export(root, run), "trained_checkpoint": f"file:///c/{run}"}
    decision, _ = promote_or_reject(LocalStorage(), profile, run, evaluation, artifacts, None,
                                    "eval-key", "score-key", holding)
    return decision.promoted, decision.held


def test_a_holding_finding_keeps_the_pointer_and_a_clear_promotes_with_who_and_why(
        profile: Profile, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from prefect.settings import PREFECT_API_URL, temporary_settings

    holding = sentinel.holding(_collapsed())
    assert [f["detector"] for f in holding] == ["group_collapse"]
    assert _judge(profile, tmp_path, "hacked", 0.5, holding) == (False, True)
    storage = LocalStorage()
    assert read_promoted(storage, profile) is None and read_history(storage, profile) == []
    assert [h.run for h in held_runs(storage, profile)] == ["hacked"]
    status = "\n".join(promoted_lines(storage, profile))
    assert "held promotion: run hacked" in status and "group_collapse" in status
    assert f"tpurl promote {profile.name} --clear hacked" in status

    with temporary_settings({PREFECT_API_URL: None}):
        code = main(["promote", "rehearsal", "--set", f"local.root={tmp_path}", "--clear",
                     "hacked", "--reason", "constant reward on purpose", "--by", "ana"])
    assert code == 0, capsys.readouterr().err
    model = read_promoted(storage, profile)
    assert model is not None and model.run == "hacked"
    assert model.clearance is not None and model.clearance.by == "ana"
    assert model.clearance.reason == "constant reward on purpose"
    assert model.clearance.detectors == ["group_collapse"]
    assert "not verified" in model.clearance.verified
    assert [m.run for m in read_history(storage, profile)] == ["hacked"]
    assert held_runs(storage, profile) == []
    assert "cleared by ana" in "\n".join(promoted_lines(storage, profile))


def test_a_warn_policy_holds_nothing(profile: Profile, tmp_path: Path) -> None:
    warned = load_profile("rehearsal", {"local.root": str(tmp_path),
                                        "health.group_collapse.policy": "warn"}, environ={})
    steps = [{"step": s, "rewards/train/mean": 1.0, "rewards/train/min": 1.0,
              "rewards/train/max": 1.0} for s in range(2)]
    judged = sentinel.after_training(steps, warned.health)
    assert [f["policy"] for f in judged] == ["warn"] and sentinel.holding(judged) == []
    assert _judge(warned, tmp_path, "warned", 0.5, sentinel.holding(judged)) == (True, False)


def test_a_stop_seen_after_training_holds(profile: Profile, tmp_path: Path) -> None:
    stop = load_profile("rehearsal", {"local.root": str(tmp_path),
                                      "health.group_collapse.policy": "stop"}, environ={})
    steps = [{"step": s, "rewards/train/mean": 1.0, "rewards/train/min": 1.0,
              "rewards/train/max": 1.0} for s in range(2)]
    assert sentinel.holding(sentinel.after_training(steps, stop.health))


def test_a_failing_run_is_rejected_not_held(profile: Profile, tmp_path: Path) -> None:
    assert judge_plain(profile, tmp_path, "champion", 0.5)
    assert _judge(profile, tmp_path, "worse", 0.2, sentinel.holding(_collapsed())) == \
        (False, False)
    assert held_runs(LocalStorage(), profile) == []


def test_refusals_come_before_any_change(profile: Profile, tmp_path: Path) -> None:
    storage = LocalStorage()
    assert _judge(profile, tmp_path, "hacked", 0.5, sentinel.holding(_collapsed()))[1]
    before = tuple(storage.read_text(uri) for uri in pointer_uris(profile))
    with pytest.raises(HoldRefused, match="--reason"):
        plan_clear(storage, profile, "hacked", "  ", "ana")
    with pytest.raises(HoldRefused, match="held now: hacked"):
        plan_clear(storage, profile, "other", "why", "ana")
    with pytest.raises(HoldRefused, match="not a run name"):
        plan_clear(storage, profile, "../../x", "why", "ana")
    # another promotion meanwhile: judged against a champion that is no longer the one
    assert judge_plain(profile, tmp_path, "later", 0.6)
    with pytest.raises(HoldRefused, match="history changed"):
        plan_clear(storage, profile, "hacked", "why", "ana")
    assert before != tuple(storage.read_text(u) for u in pointer_uris(profile))  # "later"'s
    assert [h.run for h in held_runs(storage, profile)] == ["hacked"]


def test_an_export_changed_since_the_hold_is_refused(profile: Profile, tmp_path: Path) -> None:
    storage = LocalStorage()
    assert _judge(profile, tmp_path, "hacked", 0.5, sentinel.holding(_collapsed()))[1]
    (tmp_path / "exports" / "hacked" / "model.safetensors").write_bytes(b"swapped")
    with pytest.raises(HoldRefused, match="changed since it was held"):
        plan_clear(storage, profile, "hacked", "why", "ana")
    assert read_promoted(storage, profile) is None


def test_a_clear_twice_is_refused_and_the_event_is_the_catalogued_one(
        profile: Profile, tmp_path: Path) -> None:
    storage = LocalStorage()
    assert _judge(profile, tmp_path, "hacked", 0.5, sentinel.holding(_collapsed()))[1]
    planned = plan_clear(storage, profile, "hacked", "looked at it", "ana", "os account")
    body = cleared_event(profile.name, planned)
    assert body["payload"]["clearance"]["detectors"] == ["group_collapse"]
    assert body["payload"]["decision"]["promoted"] is True
    json.dumps(body)  # what POST /events takes
    apply_clear(storage, profile, planned)
    with pytest.raises(HoldRefused, match="cleared already by ana"):
        plan_clear(storage, profile, "hacked", "again", "bob")


def test_the_team_view_lists_a_held_run(profile: Profile, tmp_path: Path) -> None:
    assert _judge(profile, tmp_path, "hacked", 0.5, sentinel.holding(_collapsed()))[1]
    lines = "\n".join(champion_lines(champion_of(profile.name, profile)))
    assert "held promotion: run hacked (group\\_collapse)" in lines
    assert "--clear hacked" in lines
    assert held_lines(LocalStorage(), profile)


def test_the_suspect_event_carries_the_catalogued_payload() -> None:
    finding = sentinel.judge([*hs_examine()], load_profile("rehearsal", environ={}).health)[0]
    body = sentinel.suspect_event("rehearsal", "run-1", finding, spend_saved=12.345)
    assert body["event"] == "tpurl.train.suspect"
    assert body["resource"]["tpurl.detector"] == finding["detector"]
    assert body["payload"]["spend_saved"] == 12.35 and body["payload"]["policy"] == "hold"
    json.dumps(body)


def hs_examine() -> list[object]:
    from flows.health.detectors import examine

    return list(examine(hs.kl_blowup(0), load_profile("rehearsal", environ={}).health))


def test_a_hold_record_naming_an_export_outside_the_root_is_refused(profile: Profile,
                                                                    tmp_path: Path) -> None:
    """The held record lives where a training pod can write: one rewritten to name another
    export (with that export's own digest) promotes nothing."""
    from flows.core.manifest import build_manifest, manifest_digest
    from flows.health.holds import hold_uri, read_hold

    storage = LocalStorage()
    assert _judge(profile, tmp_path, "hacked", 0.5, sentinel.holding(_collapsed()))[1]
    held = read_hold(storage, profile, "hacked")
    assert held is not None
    elsewhere = export(tmp_path.parent / f"{tmp_path.name}-elsewhere", "planted")
    forged = held.model_copy(update={"candidate": held.candidate.model_copy(update={
        "model_uri": elsewhere,
        "export_digest": manifest_digest(build_manifest(storage, elsewhere))})})
    storage.write_text(hold_uri(profile, "hacked"), forged.model_dump_json())
    with pytest.raises(HoldRefused, match="not to be trusted"):
        plan_clear(storage, profile, "hacked", "why", "ana")
    assert read_promoted(storage, profile) is None
