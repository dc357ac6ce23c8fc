"""One watch (flows/operations/watch.py) on real files under a real output root: two runs
promoted by the real promotion rule over real exports, the champion scored by a constructed
scorer (the evaluation program itself runs in the rehearsal and on GKE; here its scores
file is written as it writes one), the record appended to watch-history.json, the verdict,
and the regressed event's body checked against the catalogue. The event reaching a real
Prefect server, its rollback and its message are tests/test_run_choices_on_a_worker.py's."""

from __future__ import annotations

from pathlib import Path

import pytest

from flows.cli import main
from flows.common.event_catalogue import MODEL_REGRESSED
from flows.config import load_profile
from flows.config.profile import Profile
from flows.core.eval_programs import score_key
from flows.core.failures import StageFailed
from flows.core.promotion import PromotedModel
from flows.core.scores import ScoredResponse, ScoresFile
from flows.core.storage import LocalStorage
from flows.core.watch_store import read_watches
from flows.operations import watch as watch_module
from flows.operations.watch import regressed_event, run_watch, watched_profile
from flows.runpage.promotion import promote_or_reject
from tests.support.promoted import export
from tests.support.scores import summary


def _profile(tmp_path: Path, **watch: str) -> Profile:
    fields = {f"watch.{k}": v for k, v in watch.items()} or {"watch.alpha": "0.05"}
    return load_profile("rehearsal", {"local.root": str(tmp_path), **fields}, environ={})


def _promote(profile: Profile, root: Path, run: str, mean: float) -> None:
    """``run`` promoted on the promotion's held-out set (its real score key)."""
    evaluation = {"trained": _scores(mean, 64).model_dump(),
                  "base": summary(0.1).model_dump()}
    artifacts = {"hf_export": export(root, run), "trained_checkpoint": f"file:///c/{run}"}
    decision, _ = promote_or_reject(LocalStorage(), profile, run, evaluation, artifacts, None,
                                    "eval-key", score_key(profile))
    assert decision.promoted, decision.reason


def _file(mean: float, rows: int) -> ScoresFile:
    """What the evaluation program writes: rows rewards spread +-0.2 around ``mean``."""
    rewards = [mean - 0.2, mean + 0.2] * (rows // 2)
    return ScoresFile(checkpoint="ckpt", total=rows, correct=rows // 2,
                      format_correct=rows, mean_reward=mean, rewards=rewards,
                      questions=[f"question {i}" for i in range(rows)],
                      responses=[ScoredResponse(question=f"question {i}",
                                                response=f"answer {i}", reward=rewards[i])
                                 for i in range(min(rows, 8))])


def _scores(mean: float, rows: int):
    from flows.core.scores import summarize

    return summarize(_file(mean, rows))


def _scorer(by_run: dict[str, float], seen: list[tuple[str, str | None]] | None = None):
    def score(scoring: Profile, champion: PromotedModel, out: str) -> ScoresFile:
        assert scoring.eval is not None
        if seen is not None:
            seen.append((champion.trained_checkpoint, scoring.eval.files))
        assert "/watch/" + champion.run + "/" in out
        return _file(by_run[champion.run], 64)
    return score


def test_an_unchanged_champion_holds_and_a_dropped_one_regresses_with_its_evidence(
        tmp_path: Path) -> None:
    profile = _profile(tmp_path)
    _promote(profile, tmp_path, "run-a", 0.5)
    _promote(profile, tmp_path, "run-b", 0.7)
    storage = LocalStorage()
    seen: list[tuple[str, str | None]] = []
    same = run_watch(storage, profile, _scorer({"run-b": 0.7}, seen), at="2026-12-06T01:00:00+00:00")
    assert same.record.verdict == "holds" and not same.posted
    assert same.record.reference_source == "run run-b's promotion score on this set"
    assert seen == [("file:///c/run-b", None)]  # the champion's own checkpoint, eval's set
    dropped = run_watch(storage, profile, _scorer({"run-b": 0.55}),
                        at="2026-12-06T02:00:00+00:00")
    record = dropped.record
    assert record.verdict == "regressed", record.reason
    assert record.watch_number == 2 and record.threshold > same.record.threshold
    assert [r.verdict for r in read_watches(storage, profile)] == ["holds", "regressed"]
    body = regressed_event(profile.name, record)
    assert body["event"] == MODEL_REGRESSED.name
    assert body["resource"]["prefect.resource.id"] == "tpurl.model.rehearsal"
    assert body["payload"]["run"] == "run-b"
    evidence = body["payload"]["evidence"]
    assert evidence["watch_number"] == 2 and evidence["samples"] == [
        {"prompt": f"question {i}", "response": f"answer {i}",
         "reward": pytest.approx(0.55 + (0.2 if i % 2 else -0.2))} for i in range(3)]
    assert evidence["reference"]["value"] == pytest.approx(0.7)


def test_on_the_teams_own_set_a_new_champion_worse_than_the_one_it_replaced_regresses(
        tmp_path: Path) -> None:
    """A is watched on the team's set (its baseline there), B is promoted (better on the
    promotion's set), B scores lower than A did on the team's set: regressed on its first
    watch. A, restored, watched again on that set: holds."""
    from tests.support.parquet_rows import parquet_rows as _parquet

    prod_like = f"file://{_parquet(tmp_path / 'data' / 'prod-like.parquet')}"
    profile = _profile(tmp_path, files=prod_like)
    scoring, name = watched_profile(profile)
    assert scoring.eval is not None and scoring.eval.files == prod_like
    assert score_key(scoring) != score_key(profile) and name.startswith("watch.files")
    storage = LocalStorage()
    _promote(profile, tmp_path, "run-a", 0.5)
    first = run_watch(storage, profile, _scorer({"run-a": 0.6}), at="2026-12-05T01:00:00+00:00")
    assert first.record.verdict == "baseline"
    _promote(profile, tmp_path, "run-b", 0.7)
    second = run_watch(storage, profile, _scorer({"run-b": 0.3}),
                       at="2026-12-06T01:00:00+00:00")
    assert second.record.verdict == "regressed", second.record.reason
    assert "run run-a's latest watch" in second.record.reference_source
    main_ok = main(["rollback", "rehearsal", "--set", f"local.root={tmp_path}",
                    "--set", f"watch.files={prod_like}",
                    "--reason", "watched", "--by", "oncall"])
    assert main_ok == 0
    third = run_watch(storage, profile, _scorer({"run-a": 0.6}), at="2026-12-07T01:00:00+00:00")
    assert third.record.verdict == "holds" and third.record.watch_number == 1
    assert "run run-a's first watch" in third.record.reference_source


def test_watch_refuses_a_profile_without_watch_or_without_a_champion(tmp_path: Path) -> None:
    bare = load_profile("rehearsal", {"local.root": str(tmp_path), "watch": ""}, environ={})
    with pytest.raises(StageFailed) as refused:
        run_watch(LocalStorage(), bare, _scorer({}))
    assert refused.value.diagnosis.code == "eval/no-watch"
    with pytest.raises(StageFailed) as none:
        run_watch(LocalStorage(), _profile(tmp_path), _scorer({}))
    assert none.value.diagnosis.code == "eval/no-champion"
    assert read_watches(LocalStorage(), _profile(tmp_path)) == []


def test_a_watch_without_eval_is_refused_naming_the_field(tmp_path: Path) -> None:
    from flows.config import ProfileError

    path = tmp_path / "rehearsal.yaml"
    source = (Path(__file__).parents[2] / "deployments/profiles/rehearsal.yaml").read_text()
    cut = source.split("\neval:")[0]
    path.write_text(cut + "\nwatch: {}\n")
    with pytest.raises(ProfileError, match="watch") as refused:
        load_profile(str(path), {"local.root": str(tmp_path)}, environ={})
    assert "add an eval: section" in str(refused.value)


def test_the_command_prints_the_verdict_and_exits_3_on_a_regression(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from prefect.settings import PREFECT_API_URL, temporary_settings

    profile = _profile(tmp_path)
    _promote(profile, tmp_path, "run-a", 0.5)
    monkeypatch.setattr(watch_module, "program_scorer", _scorer({"run-a": 0.2}))
    args = ["watch", "rehearsal", "--set", f"local.root={tmp_path}", "--set", "watch.alpha=0.05"]
    with temporary_settings(restore_defaults={PREFECT_API_URL}):
        assert main(args) == 3
    out = capsys.readouterr().out
    assert "watch 1 of run run-a on the promotion's held-out set: regressed" in out
    assert "not posted" in out
    assert "  sample: question 0 -> answer 0 (reward 0)" in out
    assert main(["watch", "rehearsal", "--set", f"local.root={tmp_path}", "--set",
                 "watch="]) == 2
    assert "eval/no-watch" in capsys.readouterr().err


TOKEN = "hf_" + "Wz" * 17  # a Hugging Face token's shape: 34 characters after hf_


def test_the_samples_are_the_champions_responses_bounded_and_redacted(tmp_path: Path) -> None:
    """Three responses at most, each next to its prompt and reward; a long response is cut
    (the cut marked) and a token in a prompt or a response never reaches the record, the
    event or the run page."""
    from flows.core.watch_samples import PROMPT_CHARS, RESPONSE_CHARS, SAMPLES
    from flows.runpage.watch import watch_markdown

    profile = _profile(tmp_path)
    _promote(profile, tmp_path, "run-a", 0.5)
    _promote(profile, tmp_path, "run-b", 0.7)

    def scorer(scoring: Profile, champion: PromotedModel, out: str) -> ScoresFile:
        scores = _file(0.3, 64)
        kept = [ScoredResponse(question=f"say {TOKEN} please", response="x" * 5000, reward=0.1),
                ScoredResponse(question="q" * PROMPT_CHARS, response=f"it is {TOKEN}",
                               reward=0.3),
                *scores.responses]
        return scores.model_copy(update={"responses": kept})

    record = run_watch(LocalStorage(), profile, scorer).record
    assert record.verdict == "regressed"
    assert len(record.samples) == SAMPLES
    long, exact, plain = record.samples
    assert TOKEN not in long.prompt and "***" in long.prompt
    assert len(long.response) == RESPONSE_CHARS and long.response.endswith(" …")
    assert exact.prompt == "q" * PROMPT_CHARS  # at the limit: not cut
    assert exact.response == "it is ***" and exact.reward == pytest.approx(0.3)
    assert (plain.prompt, plain.response) == ("question 0", "answer 0")
    stored = (tmp_path / "tpurl-results").rglob("watch-history.json")
    texts = [p.read_text() for p in stored]
    event = str(regressed_event(profile.name, record))
    page = watch_markdown(profile.name, record)
    for text in (*texts, event, page):
        assert TOKEN not in text
    assert texts and "it is ***" in texts[0] and "it is \\*\\*\\*" in page


def test_a_record_of_prompts_alone_still_reads_and_a_response_cannot_make_markup() -> None:
    from flows.core.watch_record import WatchRecord
    from flows.runpage.watch import watch_markdown
    from tests.support.scores import summary

    old = WatchRecord.model_validate({
        "at": "2026-12-05T01:00:00+00:00", "champion_run": "r", "model_uri": "file:///m",
        "set_key": "k", "set_name": "s", "metric": "mean_reward",
        "scores": summary(0.5).model_dump(), "verdict": "holds", "reason": "no drop",
        "samples": ["an old prompt"]})
    assert old.samples[0].prompt == "an old prompt" and old.samples[0].reward is None
    hostile = old.model_copy(update={"samples": [
        old.samples[0].model_copy(update={"response": "[x](https://evil) <img src=y> | z"})]})
    page = watch_markdown("p", hostile)
    assert "[x](" not in page and "<img" not in page and "\\| z" in page
