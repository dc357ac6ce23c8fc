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
from flows.core.watch_set import SetProblem, TeamRoot, foreign_root, watch_set_problem
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


class _BucketOnDisk(LocalStorage):
    """gs://BUCKET/NAME read from a folder, listed as GcsStorage lists a prefix (every
    object below it by its name relative to the prefix, flows/backends/gke/gcs.py), so a
    remote glob is expanded the way it is against a bucket."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _path(self, uri: str) -> Path:
        assert uri.startswith("gs://"), uri
        return self.root / uri.removeprefix("gs://")


def test_a_remote_glob_names_the_files_gcs_lists_with_their_sizes(tmp_path: Path) -> None:
    """A gs:// glob is expanded against one listing of its base: each match with its size,
    in name order; what only starts like the base, or does not end like the glob, is not."""
    base = tmp_path / "bkt" / "team-a" / "watch"
    (base / "old").mkdir(parents=True)
    sizes = {}
    for name in ("b.parquet", "a.parquet", "old/c.parquet"):
        sizes[name] = len(_parquet(base / name, rows=2 + len(name)).read_bytes())
    (base / "notes.txt").write_text("x")
    (tmp_path / "bkt" / "team-a" / "watch-2").mkdir()
    _parquet(tmp_path / "bkt" / "team-a" / "watch-2" / "d.parquet")
    from flows.core.watch_set import _matches

    found = _matches(_BucketOnDisk(tmp_path), "gs://bkt/team-a/watch/*.parquet")
    assert list(found) == [f"gs://bkt/team-a/watch/{n}" for n in sorted(sizes)]
    assert found == {f"gs://bkt/team-a/watch/{n}": sizes[n] for n in sizes}
    assert _matches(_BucketOnDisk(tmp_path), "gs://bkt/team-a/none/*.parquet") == {}
    one = "gs://bkt/team-a/watch/a.parquet"
    assert _matches(_BucketOnDisk(tmp_path), one) == {one: sizes["a.parquet"]}
    assert _matches(_BucketOnDisk(tmp_path), "gs://bkt/team-a/watch") == {
        "gs://bkt/team-a/watch/": -1}  # a folder: its files, not one file


def test_a_set_is_foreign_only_under_another_teams_own_root(tmp_path: Path) -> None:
    """The boundaries of "another team's root": the root itself and anything below it, not a
    sibling that only starts like it; a link or `..` into it counts where it lands; a root
    the watching team shares, or a profile in no team, refuses nothing."""
    b_root = tmp_path / "b"
    (b_root / "sets").mkdir(parents=True)
    (tmp_path / "b-2").mkdir()
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "link").symlink_to(b_root / "sets")
    roots = [TeamRoot("pa", "team-a", str(tmp_path / "a")),
             TeamRoot("pb", "team-b", f"file://{b_root}/"),
             TeamRoot("loose", None, str(tmp_path / "loose"))]
    b = roots[1]
    assert foreign_root(str(b_root), "team-a", roots) == b
    assert foreign_root(f"{b_root}/sets/*.parquet", "team-a", roots) == b
    assert foreign_root(f"{tmp_path}/a/link/x.parquet", "team-a", roots) == b
    assert foreign_root(f"{tmp_path}/a/../b/x.parquet", None, roots) == b
    assert foreign_root(f"{tmp_path}/b-2/x.parquet", "team-a", roots) is None
    assert foreign_root(f"{tmp_path}/a/x.parquet", "team-a", roots) is None
    assert foreign_root(f"{tmp_path}/loose/x.parquet", "team-a", roots) is None
    assert foreign_root(f"{b_root}/x.parquet", "team-b", roots) is None  # its own
    shared = [*roots, TeamRoot("pa2", "team-a", str(b_root))]  # one root, two teams
    assert foreign_root(f"{b_root}/x.parquet", "team-a", shared) is None
    assert foreign_root(f"{b_root}/x.parquet", None, shared) == b  # not the watcher's
    gs = [TeamRoot("pg", "team-b", "gs://bkt/team-b")]
    assert foreign_root("gs://bkt/team-b/w/*.parquet", "team-a", gs) == gs[0]
    assert foreign_root("gs://bkt/team-b-old/w.parquet", "team-a", gs) is None


def test_the_refusals_say_what_was_found_and_the_fix_word_for_word(tmp_path: Path) -> None:
    """Each refusal's text, as a user reads it (the fix names watch.files); an hf:// set is
    the evaluation program's to fetch, so nothing here refuses it."""
    roots = [TeamRoot("pb", "team-b", "gs://bkt/team-b/")]
    storage = _BucketOnDisk(tmp_path)
    for team, whose in (("team-a", "team team-a"), (None, "a profile in no team")):
        found = watch_set_problem(storage, "gs://bkt/team-b/w.parquet", team, lambda: roots)
        assert found == SetProblem(
            f"gs://bkt/team-b/w.parquet is under gs://bkt/team-b/, the output root of profile "
            f"pb of team team-b, not of {whose}",
            "copy the rows to your own bucket or directory and name them in watch.files",
            Failure.EVAL_WATCH_SET_FOREIGN)
    missing = "point watch.files at existing parquet files (a local path, file:// or gs:// " \
        "URI), or remove it to watch on the promotion's held-out set"
    assert watch_set_problem(storage, "gs://bkt/x/w.parquet", "team-a", lambda: roots) == \
        SetProblem("gs://bkt/x/w.parquet does not exist", missing, Failure.DATA_INVALID)
    assert watch_set_problem(storage, "gs://bkt/x/*.parquet", "team-a", lambda: roots) == \
        SetProblem("gs://bkt/x/*.parquet does not exist (the glob matches no file)", missing,
                   Failure.DATA_INVALID)
    _parquet(tmp_path / "bkt" / "x" / "d" / "w.parquet")
    assert watch_set_problem(storage, "gs://bkt/x/d/", "team-a", lambda: roots) == SetProblem(
        "gs://bkt/x/d/ is a directory", "name its parquet files in watch.files, e.g. "
        "gs://bkt/x/d/*.parquet", Failure.DATA_INVALID)
    assert watch_set_problem(storage, "hf://datasets/org/rows", "team-a", lambda: roots) is None
    own = watch_set_problem(storage, "gs://bkt/team-b/w.parquet", "team-b", lambda: roots)
    assert own is not None and own.code == Failure.DATA_INVALID  # its own root: only missing
    (tmp_path / "bkt" / "x" / "zero.parquet").write_bytes(b"")  # a file of 0 bytes: a file
    zero = watch_set_problem(storage, "gs://bkt/x/zero.parquet", "team-a", lambda: roots)
    assert zero is not None and zero.problem.endswith("it is not a parquet file (no PAR1 footer)")


def test_the_file_count_limit_holds_at_its_value_and_the_texts_are_whole(tmp_path: Path) -> None:
    """MAX_FILES files pass and one more is refused; the size, column, footer and row
    refusals read as a user gets them; rows are added over every file, whichever holds
    them (a set whose last file is empty still has its first file's rows)."""
    from flows.core.watch_set import MAX_FILES

    many = tmp_path / "many"
    for i in range(MAX_FILES):
        _parquet(many / f"{i:03}.parquet", rows=1)
    assert _problem(many / "*.parquet") is None
    _parquet(many / "999.parquet", rows=1)
    assert _problem(many / "*.parquet") == SetProblem(
        f"{many}/*.parquet matches {MAX_FILES + 1} files, more than {MAX_FILES}",
        "merge the set into fewer parquet files", Failure.DATA_INVALID)
    good = _parquet(tmp_path / "good.parquet")
    size = good.stat().st_size
    assert _problem(good, max_bytes=size - 1) == SetProblem(
        f"{good} holds {size:,} bytes, more than the watch reads ({size - 1:,})",
        "keep a sample of the rows in watch.files: the watch scores eval.batches batches of "
        "them", Failure.DATA_INVALID)
    wrong = _parquet(tmp_path / "wrong.parquet", columns=("text", "label"))
    found = _problem(wrong)
    assert found is not None and found.problem.startswith(f"file://{wrong} has columns label, text;")
    assert found.fix == "rename the columns in the files watch.files names (e.g. " \
        "problem/expected_answer)"
    (tmp_path / "text.parquet").write_text("question,answer\n")
    assert _problem(tmp_path / "text.parquet") == SetProblem(
        f"file://{tmp_path}/text.parquet: it is not a parquet file (no PAR1 footer)",
        "watch.files must name parquet files", Failure.DATA_INVALID)
    _parquet(tmp_path / "s" / "a.parquet", rows=2)
    _parquet(tmp_path / "s" / "b.parquet", rows=0)
    assert _problem(tmp_path / "s" / "*.parquet") is None
    (tmp_path / "s" / "a.parquet").unlink()
    assert _problem(tmp_path / "s" / "*.parquet") == SetProblem(
        f"{tmp_path}/s/*.parquet holds no row", "give watch.files rows to score",
        Failure.DATA_INVALID)
