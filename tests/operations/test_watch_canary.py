"""A watch's serving canary (``watch.canary``, decision 0042) on real files under a real
output root: the champion promoted by the real promotion rule, the evaluation's two score
files written where the program writes them (the program itself runs in the rehearsal and on
GKE: tests/backends/gke/test_watch_job.py runs the canary from a JobSet), the canary judged
against the champion's reference by the same test, its record, output, page and event; an
unscored canary is ``unreachable``, never a regression; the profile refuses a canary that
cannot be a server, naming the field and a fix that loads; team a's canary has no field that
could reach team b's rewards or set."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from flows.cli import main
from flows.common.event_catalogue import MODEL_REGRESSED, SERVING_REGRESSED
from flows.config import ProfileError, load_profile
from flows.config.profile import Profile
from flows.core.canary import API_KEY_ENV, CANARY_FILE, canary_args, read_canary
from flows.core.eval_programs import score_key
from flows.core.promotion import PromotedModel
from flows.core.scores import ScoredResponse, ScoresFile
from flows.core.storage import LocalStorage, join
from flows.core.watch_store import read_watches
from flows.operations import watch as watch_module
from flows.operations.watch import regressed_event, run_watch, serving_regressed_event
from flows.runpage.promotion import promote_or_reject
from flows.runpage.watch import watch_markdown
from tests.support.promoted import export
from tests.support.scores import summary

SERVER = "http://vllm.serving.svc.cluster.local:8000"
CANARY = {"watch.canary.endpoint": SERVER, "watch.canary.model": "served-model"}


def _profile(tmp_path: Path, **fields: str) -> Profile:
    return load_profile("rehearsal", {"local.root": str(tmp_path), "watch.alpha": "0.05",
                                      **CANARY, **fields}, environ={})


def _promote(profile: Profile, root: Path, run: str, mean: float) -> None:
    evaluation = {"trained": summary(mean, total=64).model_dump(),
                  "base": summary(0.1).model_dump()}
    artifacts = {"hf_export": export(root, run), "trained_checkpoint": f"file:///c/{run}"}
    decision, _ = promote_or_reject(LocalStorage(), profile, run, evaluation, artifacts, None,
                                    "eval-key", score_key(profile))
    assert decision.promoted, decision.reason


def _file(mean: float, rows: int, response: str = "answer") -> ScoresFile:
    rewards = [mean - 0.2, mean + 0.2] * (rows // 2)
    return ScoresFile(checkpoint="ckpt", total=rows, correct=rows // 2, format_correct=rows,
                      mean_reward=mean, rewards=rewards,
                      responses=[ScoredResponse(question=f"question {i}",
                                                response=f"{response} {i}", reward=rewards[i])
                                 for i in range(min(rows, 8))])


def _scorer(checkpoint: float, canary: dict[str, Any] | ScoresFile | None):
    """The program as it ends: the checkpoint's scores returned, the canary's file written
    beside them (``None``: a program that wrote none)."""
    def score(scoring: Profile, champion: PromotedModel, out: str) -> ScoresFile:
        if canary is not None:
            text = (canary.model_dump_json() if isinstance(canary, ScoresFile)
                    else json.dumps(canary))
            LocalStorage().write_text(join(out, CANARY_FILE), text)
        return _file(checkpoint, 64)
    return score


def test_a_served_model_worse_than_the_champion_regresses_as_the_serving_not_the_model(
        tmp_path: Path) -> None:
    """Same champion, served well then badly: the canary holds, then regresses with its own
    event on the serving's resource (the rollback trigger watches the model's), its own
    watch count, and its samples; the checkpoint holds throughout and stays the reference."""
    profile = _profile(tmp_path)
    _promote(profile, tmp_path, "run-a", 0.7)
    storage = LocalStorage()
    good = run_watch(storage, profile, _scorer(0.7, _file(0.7, 16, "served")),
                     at="2026-12-06T01:00:00+00:00")
    assert good.record.verdict == "holds" and good.canary is not None
    assert good.canary.verdict == "holds" and good.canary.source == "canary"
    assert good.canary.reference_source == "run run-a's promotion score on this set"
    bad = run_watch(storage, profile, _scorer(0.7, _file(0.3, 16, "served")),
                    at="2026-12-06T02:00:00+00:00")
    assert bad.record.verdict == "holds" and bad.regressed
    canary = bad.canary
    assert canary is not None and canary.verdict == "regressed", canary.reason
    assert canary.watch_number == 2 and bad.record.watch_number == 2  # each source its own
    assert canary.served == f"served-model at {SERVER}"
    assert [s.response for s in canary.samples] == ["served 0", "served 1", "served 2"]
    history = read_watches(storage, profile)
    assert [(r.source, r.verdict) for r in history] == [
        ("checkpoint", "holds"), ("canary", "holds"), ("checkpoint", "holds"),
        ("canary", "regressed")]
    body = serving_regressed_event(profile.name, canary)
    assert body["event"] == SERVING_REGRESSED.name != MODEL_REGRESSED.name
    assert body["resource"]["prefect.resource.id"] == "tpurl.serving.rehearsal"
    assert body["resource"]["tpurl.profile"] == "rehearsal"
    payload = body["payload"]
    assert payload["run"] == "run-a" and payload["served"] == canary.served
    assert payload["evidence"]["source"] == "canary"
    assert payload["evidence"]["samples"][0]["response"] == "served 0"
    assert regressed_event(profile.name, bad.record)["payload"]["evidence"]["source"] == \
        "checkpoint"
    lines = "\n".join(bad.lines())
    assert f"canary 2 of served served-model at {SERVER} on the promotion's held-out set: " \
           "regressed" in lines
    assert "tpurl.serving.regressed not posted" in lines and "sample: question 0 -> served 0" \
        in lines
    page = watch_markdown(profile.name, bad.record, canary)
    assert "## Serving canary: **regressed**" in page and "Sample outputs of the served model" \
        in page
    third = run_watch(storage, profile, _scorer(0.7, _file(0.7, 16)),
                      at="2026-12-06T03:00:00+00:00")
    assert third.record.reference_source == "run run-a's promotion score on this set"
    assert third.record.watch_number == 3  # the canary's watches are not the checkpoint's


@pytest.mark.parametrize(("canary", "words"), [
    ({"unreachable": "HTTP 503 after 3 tries from http://x/v1/completions: busy"},
     "HTTP 503 after 3 tries"),
    (None, "wrote no canary scores"),
    ({"checkpoint": "served", "total": 0, "correct": 0, "format_correct": 0,
      "mean_reward": 0.0}, "sent no prompt"),
    ({"total": "many"}, "unreadable"),
])
def test_a_canary_that_could_not_be_scored_is_unreachable_never_regressed(
        tmp_path: Path, canary: dict[str, Any] | None, words: str) -> None:
    profile = _profile(tmp_path)
    _promote(profile, tmp_path, "run-a", 0.7)
    outcome = run_watch(LocalStorage(), profile, _scorer(0.7, canary))
    assert outcome.canary is not None and outcome.canary.verdict == "unreachable"
    assert words in outcome.canary.reason and not outcome.regressed
    assert outcome.canary.reason.startswith("canary unreachable, not judged: ")
    assert not outcome.canary_posted and outcome.canary.samples == []
    assert outcome.canary.scores.samples == 0  # not the checkpoint's scores under its name
    assert f"canary of served served-model at {SERVER} on the promotion's held-out set: " \
           "unreachable" in outcome.lines()
    after = run_watch(LocalStorage(), profile, _scorer(0.7, _file(0.7, 16)))
    assert after.canary is not None and after.canary.watch_number == 1  # spent no alpha
    page = watch_markdown(profile.name, outcome.record, outcome.canary)
    assert "## Serving canary: **unreachable**" in page


def test_an_unreachable_canary_exits_0_and_a_regressed_one_3(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from prefect.settings import PREFECT_API_URL, temporary_settings

    profile = _profile(tmp_path)
    _promote(profile, tmp_path, "run-a", 0.7)
    args = ["watch", "rehearsal", "--set", f"local.root={tmp_path}",
            *[a for k, v in CANARY.items() for a in ("--set", f"{k}={v}")]]
    with temporary_settings(restore_defaults={PREFECT_API_URL}):
        monkeypatch.setattr(watch_module, "program_scorer",
                            _scorer(0.7, {"unreachable": "cannot reach it"}))
        assert main(args) == 0
        assert "canary unreachable, not judged: cannot reach it" in capsys.readouterr().out
        monkeypatch.setattr(watch_module, "program_scorer", _scorer(0.7, _file(0.2, 16)))
        assert main(args) == 3
    assert "canary 1 of served" in capsys.readouterr().out


TOKEN = "hf_" + "Qz" * 17


def test_the_key_stays_a_reference_and_a_server_echoing_secrets_is_redacted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The program's options name the endpoint, never the key: the key goes to the backend
    as a secret reference (resolved at the last moment, so registered with the redactor);
    a hostile server that echoes the key, or a token, in its answers and its error does not
    get either into the record, the event or the page."""
    from flows.core.secrets import resolve

    key = "sk-served-" + "z" * 30
    monkeypatch.setenv("CANARY_KEY", key)
    profile = _profile(tmp_path, **{"watch.canary.api_key.env": "CANARY_KEY",
                                    "watch.canary.prompts": "8"})
    canary = profile.watch.canary if profile.watch else None
    assert canary is not None and canary.api_key is not None
    argv = canary_args(canary, "file:///out")
    assert key not in " ".join(argv) and argv[argv.index("--canary-prompts") + 1] == "8"
    seen: list[Any] = []

    def backend(scoring: Profile) -> Any:
        from flows.backends import backend_for

        real = backend_for(scoring, stage="watch")

        class Capture:
            runtime = real.runtime

            def run_workload(self, workload: Any, log: str) -> None:
                seen.append(workload)
                out = workload.outputs[0]
                LocalStorage().write_text(join(out, "scores.json"), _file(0.7, 64).model_dump_json())
                echo = _file(0.1, 16, f"your key is {key} and {TOKEN}")
                LocalStorage().write_text(join(out, CANARY_FILE), echo.model_dump_json())
        return Capture()

    _promote(profile, tmp_path, "run-a", 0.7)
    resolve(canary.api_key)  # as the backend resolves it before the program starts
    outcome = run_watch(LocalStorage(), profile, watch_module.ProgramScorer(backend))
    [workload] = seen
    assert (API_KEY_ENV, canary.api_key) in workload.secret_env
    assert key not in " ".join(workload.argv) and "--canary-endpoint" in workload.argv
    assert "served_completions.py" in {f.name for f in workload.files}
    assert outcome.canary is not None and outcome.canary.verdict == "regressed"
    texts = [json.dumps(serving_regressed_event(profile.name, outcome.canary)),
             watch_markdown(profile.name, outcome.record, outcome.canary),
             "\n".join(outcome.lines()),
             *(p.read_text() for p in tmp_path.rglob("watch-history.json"))]
    for text in texts:
        assert key not in text and TOKEN not in text
    assert "your key is ***" in texts[0]
    unreachable = read_canary(json.dumps({"unreachable": f"HTTP 401: bad key {key}"}))
    assert key not in unreachable.unreachable and "bad key ***" in unreachable.unreachable


def test_the_page_escapes_what_the_server_said() -> None:
    profile_record = _profile_record()
    hostile = profile_record.model_copy(update={
        "source": "canary", "served": "m at http://x", "verdict": "unreachable",
        "reason": "canary unreachable, not judged: [click](https://evil) <img src=y>"})
    page = watch_markdown("p", profile_record, hostile)
    assert "[click](" not in page and "<img" not in page


def _profile_record() -> Any:
    from flows.core.watch_record import WatchRecord

    return WatchRecord(at="2026-12-06T01:00:00+00:00", champion_run="r", model_uri="m",
                       set_key="k", set_name="s", metric="mean_reward",
                       scores=summary(0.5), verdict="holds", reason="no drop")


def test_a_record_from_before_canaries_reads_as_the_checkpoints() -> None:
    from flows.core.watch_record import WatchRecord

    old = WatchRecord.model_validate({
        "at": "2026-12-05T01:00:00+00:00", "champion_run": "r", "model_uri": "file:///m",
        "set_key": "k", "set_name": "s", "metric": "mean_reward",
        "scores": summary(0.5).model_dump(), "verdict": "holds", "reason": "no drop"})
    assert old.source == "checkpoint" and old.served == ""


# --- the profile: each refusal names watch.canary.<field> and a fix that, applied, loads ---

@pytest.mark.parametrize(("fields", "words", "fixed"), [
    ({"watch.canary.endpoint": "ftp://vllm:8000"}, "is not an http(s) URL",
     {"watch.canary.endpoint": "http://vllm.serving.svc.cluster.local:8000"}),
    ({"watch.canary.endpoint": "vllm:8000"}, "is not an http(s) URL",
     {"watch.canary.endpoint": "http://vllm.serving.svc.cluster.local:8000"}),
    ({"watch.canary.endpoint": "https://user:secret-pass@vllm.example.com"},
     "holds a user, password, query or fragment",
     {"watch.canary.endpoint": "https://vllm.example.com"}),
    ({"watch.canary.endpoint": "https://vllm.example.com?api_key=abc"},
     "holds a user, password, query or fragment",
     {"watch.canary.endpoint": "https://vllm.example.com"}),
    ({"watch.canary.endpoint": "https://vllm.example.com/v1"}, "names an API path",
     {"watch.canary.endpoint": "https://vllm.example.com"}),
    ({"watch.canary.endpoint": "https://vllm.example.com/v1/completions"}, "names an API path",
     {"watch.canary.endpoint": "https://vllm.example.com"}),
    ({"watch.canary.endpoint": "http://vllm.example.com:8000",
      "watch.canary.api_key.env": "CANARY_KEY"}, "in clear text to vllm.example.com",
     {"watch.canary.endpoint": "https://vllm.example.com:8000"}),
    ({"watch.canary.endpoint": "http://vllm.example.com:8000",
      "watch.canary.api_key.env": "CANARY_KEY"}, "in clear text to vllm.example.com",
     {"watch.canary.endpoint": "http://vllm.serving.svc.cluster.local:8000"}),
])
def test_each_refused_endpoint_names_the_field_and_its_fix_loads(
        tmp_path: Path, fields: dict[str, str], words: str, fixed: dict[str, str]) -> None:
    with pytest.raises(ProfileError) as refused:
        _profile(tmp_path, **fields)
    text = str(refused.value)
    assert "watch.canary.endpoint" in text and words in text and "fix:" in text
    assert "secret-pass" not in text and "api_key=abc" not in text  # never echoed
    loaded = _profile(tmp_path, **{**fields, **fixed})
    assert loaded.watch is not None and loaded.watch.canary is not None


@pytest.mark.parametrize(("field", "value", "limit"), [
    ("prompts", "0", "1"), ("prompts", "513", "512"), ("timeout_s", "0", "0"),
    ("timeout_s", "601", "600"), ("model", "", "1")])
def test_the_counts_hold_at_their_limits_and_refuse_one_past(
        tmp_path: Path, field: str, value: str, limit: str) -> None:
    with pytest.raises(ProfileError, match=rf"watch\.canary\.{field}"):
        _profile(tmp_path, **{f"watch.canary.{field}": value})
    if field != "model":
        at_limit = limit if limit != "0" else "0.001"
        loaded = _profile(tmp_path, **{f"watch.canary.{field}": at_limit})
        assert loaded.watch is not None and loaded.watch.canary is not None


def test_without_a_canary_the_watch_scores_only_the_checkpoint(tmp_path: Path) -> None:
    profile = load_profile("rehearsal", {"local.root": str(tmp_path)}, environ={})
    assert profile.watch is not None and profile.watch.canary is None
    _promote(profile, tmp_path, "run-a", 0.7)
    outcome = run_watch(LocalStorage(), profile, _scorer(0.7, None))
    assert outcome.canary is None and len(read_watches(LocalStorage(), profile)) == 1
    minimal = _profile(tmp_path)  # endpoint and model only: every other field its default
    assert minimal.watch is not None and minimal.watch.canary is not None
    assert minimal.watch.canary.api_key is None and minimal.watch.canary.prompts == 16


# --- two teams: team a's canary cannot reach team b's rewards or set ---

@pytest.mark.parametrize("field", ["files", "reward_functions_path", "dataset_name", "split"])
def test_a_canary_has_no_field_that_names_other_rows_or_rewards(tmp_path: Path,
                                                                 field: str) -> None:
    """Its prompts are the watched set's and its rewards the training's: a canary field
    naming either (another team's rewards file, another set) is refused as unknown."""
    with pytest.raises(ProfileError, match=rf"watch\.canary\.{field}"):
        _profile(tmp_path, **{f"watch.canary.{field}": "/team-b/rewards.py"})


def test_team_as_canary_on_team_bs_set_is_refused_before_the_server_is_asked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The attack: team a watches with a canary on rows under team b's root, so the served
    model would be sent team b's prompts and three of them copied into the event. Refused as
    the checkpoint's watch is (eval/watch-set-foreign), before the evaluation, and so the
    server, is asked anything."""
    from flows.common.failure_codes import Failure
    from flows.core.failures import StageFailed
    from tests.support.openai_server import openai_server
    from tests.support.parquet_rows import parquet_rows

    teams = tmp_path / "teams.yaml"
    teams.write_text("teams:\n"
                     "  a: {usd_per_month: 100, profiles: [rehearsal]}\n"
                     "  b: {usd_per_month: 100, profiles: [rehearsal-llama]}\n")
    monkeypatch.setenv("TPURL_TEAMS_FILE", str(teams))
    theirs = Path(load_profile("rehearsal-llama", environ={}).section.output_root()
                  .removeprefix("file://"))
    with openai_server() as server:
        profile = load_profile("rehearsal", {
            "local.root": str(tmp_path / "ours"),
            "watch.files": str(theirs / "sets" / "rows.parquet"),
            "watch.canary.endpoint": server.url, "watch.canary.model": "served-model"},
            environ={})
        _promote(profile, tmp_path / "ours", "run-a", 0.7)
        called: list[str] = []

        def scorer(scoring: Profile, champion: PromotedModel, out: str) -> ScoresFile:
            called.append(out)
            return _file(0.7, 64)

        with pytest.raises(StageFailed) as refused:
            run_watch(LocalStorage(), profile, scorer)
        assert refused.value.diagnosis.code == Failure.EVAL_WATCH_SET_FOREIGN
        assert called == [] and server.requests() == []
        own = parquet_rows(tmp_path / "ours" / "sets" / "rows.parquet")
        fixed = load_profile("rehearsal", {
            "local.root": str(tmp_path / "ours"), "watch.files": str(own),
            "watch.canary.endpoint": server.url, "watch.canary.model": "served-model"},
            environ={})
        assert run_watch(LocalStorage(), fixed, scorer).record.verdict == "baseline"


# --- in any order of watches, each source keeps its own count and the reference stays the
# --- checkpoint's

def test_in_any_order_the_canary_counts_its_own_and_never_becomes_the_reference() -> None:
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from flows.core.promotion import PromotedModel
    from flows.core.watch_record import WatchRecord, choose_reference, watch_number

    kinds = st.tuples(st.sampled_from(["checkpoint", "canary"]),
                      st.sampled_from(["holds", "regressed", "inconclusive", "baseline",
                                       "unreachable"]),
                      st.sampled_from(["run-a", "run-b"]), st.sampled_from(["k", "other"]))

    @settings(max_examples=200, deadline=None)
    @given(st.lists(kinds, max_size=12))
    def check(history: list[tuple[str, str, str, str]]) -> None:
        records = [WatchRecord(at=f"2026-12-{1 + i % 28:02d}T00:00:00+00:00",
                               champion_run=run, model_uri="m", set_key=key, set_name="s",
                               metric="mean_reward",
                               scores=summary(0.9 if source == "canary" else 0.5),
                               verdict=verdict, reason="r", source=source)
                   for i, (source, verdict, run, key) in enumerate(history)]
        judged = {s: sum(1 for (src, v, run, key) in history if src == s and run == "run-b"
                         and key == "k" and v not in ("baseline", "unreachable"))
                  for s in ("checkpoint", "canary")}
        assert watch_number(records, "run-b", "k") == 1 + judged["checkpoint"]
        assert watch_number(records, "run-b", "k", "canary") == 1 + judged["canary"]
        champion = PromotedModel(model_uri="m", trained_checkpoint="c", scores=summary(0.5),
                                 base_scores=summary(0.1), run="run-b", dataset="d",
                                 revision="r", promoted_at="2026-12-01T00:00:00+00:00",
                                 metric="mean_reward", score_key="promotion-set")
        reference = choose_reference(champion, None, records, "k", "mean_reward")
        own = [r for r in records if r.source == "checkpoint" and r.champion_run == "run-b"
               and r.set_key == "k"]
        assert (reference is None) == (not own)
        if reference is not None:
            assert reference.interval == own[0].scores.mean_reward  # never a canary's 0.9

    check()

