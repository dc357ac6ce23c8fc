"""The watch's own set (``watch.files``) is untrusted input: each way it can be wrong is
refused before the watch scores or writes anything, naming the field and the fix, on real
parquet files; a set under another team's output root (a teams file of two teams) is refused
before anything there is read, and following the fix (the rows copied to the team's own
root) lets the watch run."""

from __future__ import annotations

from pathlib import Path

import pytest

from flows.common.failure_codes import Failure
from flows.config import ProfileError, load_profile
from flows.config.profile import Profile
from flows.core.eval_programs import score_key
from flows.core.failures import StageFailed
from flows.core.promotion import PromotedModel
from flows.core.scores import ScoresFile
from flows.core.storage import LocalStorage
from flows.core.watch_set import TeamRoot, foreign_root, watch_set_problem
from flows.core.watch_store import read_watches, watch_history_uri
from flows.operations.watch import run_watch
from flows.runpage.promotion import promote_or_reject
from tests.support.parquet_rows import parquet_rows as _parquet
from tests.support.promoted import export
from tests.support.scores import summary


def _no_roots() -> list[TeamRoot]:
    return []


def _problem(files: str | Path, **kwargs: int):
    return watch_set_problem(LocalStorage(), str(files), None, _no_roots, **kwargs)


def test_each_malformed_set_is_refused_naming_the_field_and_the_fix(tmp_path: Path) -> None:
    good = _parquet(tmp_path / "good.parquet")
    assert _problem(good) is None
    assert _problem(f"file://{good}") is None
    (tmp_path / "text.parquet").write_text("question,answer\n1,2\n")
    cut = tmp_path / "cut.parquet"
    cut.write_bytes(good.read_bytes()[:20] + b"\x10\x00\x00\x00PAR1")
    _parquet(tmp_path / "wrong.parquet", columns=("text", "label"))
    _parquet(tmp_path / "empty.parquet", rows=0)
    (tmp_path / "dir").mkdir()
    _parquet(tmp_path / "dir" / "a.parquet")
    cases = {
        str(tmp_path / "missing.parquet"): "does not exist",
        str(tmp_path / "none-*.parquet"): "the glob matches no file",
        str(tmp_path / "text.parquet"): "not a parquet file",
        str(cut): "does not parse",
        str(tmp_path / "wrong.parquet"): "needs a question column",
        str(tmp_path / "empty.parquet"): "holds no row",
        str(tmp_path / "dir"): "is a directory",
    }
    for files, words in cases.items():
        found = _problem(files)
        assert found is not None and words in found.problem, (files, found)
        assert found.code == Failure.DATA_INVALID and "watch.files" in found.fix
    assert _problem(tmp_path / "dir" / "*.parquet") is None  # the directory's fix, applied


def test_the_size_limit_holds_at_its_value_and_refuses_one_byte_past(tmp_path: Path) -> None:
    good = _parquet(tmp_path / "good.parquet")
    size = good.stat().st_size
    assert _problem(good, max_bytes=size) is None
    found = _problem(good, max_bytes=size - 1)
    assert found is not None and f"{size:,} bytes" in found.problem
    assert "eval.batches" in found.fix


def test_a_glob_of_several_files_counts_their_rows_and_bytes_together(tmp_path: Path) -> None:
    _parquet(tmp_path / "s" / "a.parquet", rows=0)
    assert _problem(tmp_path / "s" / "*.parquet") is not None  # no row in all of them
    b = _parquet(tmp_path / "s" / "b.parquet", rows=2)
    assert _problem(tmp_path / "s" / "*.parquet") is None
    total = sum(p.stat().st_size for p in (tmp_path / "s").iterdir())
    assert _problem(tmp_path / "s" / "*.parquet", max_bytes=total - 1) is not None
    assert b.exists()


def test_another_teams_root_is_foreign_a_shared_or_own_one_is_not() -> None:
    roots = [TeamRoot("p-a", "a", "gs://bucket-a"), TeamRoot("p-b", "b", "gs://bucket-b"),
             TeamRoot("p-shared", "b", "gs://shared"), TeamRoot("p-a2", "a", "gs://shared")]
    assert foreign_root("gs://bucket-b/rows.parquet", "a", roots) == roots[1]
    assert foreign_root("gs://bucket-b", "a", roots) == roots[1]
    assert foreign_root("gs://bucket-bb/rows.parquet", "a", roots) is None  # not its prefix
    assert foreign_root("gs://bucket-a/rows.parquet", "a", roots) is None
    assert foreign_root("gs://shared/rows.parquet", "a", roots) is None
    assert foreign_root("gs://bucket-b/*.parquet", "a", roots) == roots[1]
    # a profile in no team reads no team's root
    assert foreign_root("gs://bucket-a/rows.parquet", None, roots) == roots[0]


def test_a_link_into_another_teams_directory_is_foreign(tmp_path: Path) -> None:
    theirs = _parquet(tmp_path / "theirs" / "rows.parquet")
    (tmp_path / "ours").mkdir()
    (tmp_path / "ours" / "rows.parquet").symlink_to(theirs)
    roots = [TeamRoot("p-b", "b", f"file://{tmp_path / 'theirs'}"),
             TeamRoot("p-a", "a", f"file://{tmp_path / 'ours'}")]
    assert foreign_root(str(tmp_path / "ours" / "rows.parquet"), "a", roots) == roots[0]
    assert foreign_root(str(tmp_path / "ours" / ".." / "theirs" / "rows.parquet"), "a",
                        roots) == roots[0]


def _two_teams(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Team a: the rehearsal profile; team b: rehearsal-llama, whose root is its own."""
    teams = tmp_path / "teams.yaml"
    teams.write_text("teams:\n"
                     "  a: {usd_per_month: 100, profiles: [rehearsal]}\n"
                     "  b: {usd_per_month: 100, profiles: [rehearsal-llama]}\n")
    monkeypatch.setenv("TPURL_TEAMS_FILE", str(teams))
    root = load_profile("rehearsal-llama", environ={}).section.output_root()
    return Path(root.removeprefix("file://"))


def _watched(tmp_path: Path, files: Path) -> Profile:
    profile = load_profile("rehearsal", {"local.root": str(tmp_path / "ours"),
                                         "watch.files": str(files)}, environ={})
    evaluation = {"trained": summary(0.5).model_dump(), "base": summary(0.1).model_dump()}
    artifacts = {"hf_export": export(tmp_path / "ours", "run-a"),
                 "trained_checkpoint": "file:///c/run-a"}
    decision, _ = promote_or_reject(LocalStorage(), profile, "run-a", evaluation, artifacts,
                                    None, "eval-key", score_key(profile))
    assert decision.promoted
    return profile


def test_a_set_in_another_teams_root_is_refused_before_anything_is_read_or_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The attack: team a's profile names rows under team b's root as its watch set; the
    watch would score them and copy three of them into its event. Refused with the code and
    the fix before the file is even looked for (it does not exist: not "does not exist");
    nothing scored, nothing recorded. The fix applied (the rows in team a's root): the
    watch runs."""
    theirs = _two_teams(tmp_path, monkeypatch)
    rows = _parquet(tmp_path / "prod-like.parquet")  # what team b keeps, in its root:
    profile = _watched(tmp_path, theirs / "sets" / "prod-like.parquet")  # never read
    scored: list[str] = []

    def scorer(scoring: Profile, champion: PromotedModel, out: str) -> ScoresFile:
        assert scoring.eval is not None and scoring.eval.files
        scored.append(scoring.eval.files)
        return ScoresFile(checkpoint="c", total=4, correct=2, format_correct=4,
                          mean_reward=0.5, rewards=[0.4, 0.6, 0.4, 0.6])

    with pytest.raises(StageFailed) as refused:
        run_watch(LocalStorage(), profile, scorer)
    diagnosis = refused.value.diagnosis
    assert diagnosis.code == Failure.EVAL_WATCH_SET_FOREIGN
    assert "watch.files" in diagnosis.summary and "rehearsal-llama of team b" in diagnosis.summary
    assert "watch.files" in diagnosis.fix
    assert scored == [] and read_watches(LocalStorage(), profile) == []
    assert not Path(watch_history_uri(profile).removeprefix("file://")).exists()
    own = tmp_path / "ours" / "sets" / "prod-like.parquet"
    own.parent.mkdir(parents=True)
    own.write_bytes(rows.read_bytes())
    fixed = load_profile("rehearsal", {"local.root": str(tmp_path / "ours"),
                                       "watch.files": str(own)}, environ={})
    assert run_watch(LocalStorage(), fixed, scorer).record.verdict == "baseline"
    assert scored == [str(own)]


def test_a_malformed_set_fails_the_watch_before_scoring(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    _two_teams(tmp_path, monkeypatch)
    bad = tmp_path / "ours" / "sets" / "wrong.parquet"
    _parquet(bad, columns=("text", "label"))
    profile = _watched(tmp_path, bad)

    def scorer(*_: object) -> ScoresFile:
        raise AssertionError("scored a refused set")

    with pytest.raises(StageFailed) as refused:
        run_watch(LocalStorage(), profile, scorer)
    assert refused.value.diagnosis.code == Failure.DATA_INVALID
    assert refused.value.diagnosis.summary.startswith("watch.files: ")
    assert read_watches(LocalStorage(), profile) == []


@pytest.mark.parametrize(("files", "words"), [
    ("gs://b/../other/rows.parquet", "'..' segment"),
])
def test_the_profile_refuses_a_climbing_path_and_the_training_rows(
        tmp_path: Path, files: str, words: str) -> None:
    with pytest.raises(ProfileError, match=r"watch\.files") as refused:
        load_profile("rehearsal", {"local.root": str(tmp_path), "watch.files": files},
                     environ={})
    assert words in str(refused.value)
    train = str(tmp_path / "train.parquet")
    with pytest.raises(ProfileError, match="names the training files"):
        load_profile("rehearsal", {"local.root": str(tmp_path), "data.train_files": train,
                                   "watch.files": train}, environ={})
