"""Is the watch's own set (``watch.files``) one the watch may read and MaxText can score?
Checked before the watch scores anything or writes anything.

The set is named in the profile, but what it names is the bucket's (or the disk's) content:
untrusted, as the training dataset is (flows/core/dataset.py). So a watch refuses, naming
``watch.files`` and the fix:

- a set under another team's output root (the teams file's profiles of another team, or of
  any team for a profile in none): a watch runs with this team's identity and would score,
  and copy into its evidence, rows another team keeps; that root is checked first, before
  anything there is read;
- a set that does not exist, names a directory, is not parquet, has no question or answer
  column (the columns MaxText's RL pipeline reads: flows/core/dataset.py), holds no row, or
  is larger than ``MAX_BYTES`` altogether (MaxText's ``get_dataset`` reads the whole files
  into the evaluation's process; a watch scores ``eval.batches`` batches of them).

Only footers and sizes are read (a range read and a listing on GCS). A hub set (``hf://``)
is read by MaxText in the pod and checked there.
"""

from __future__ import annotations

import fnmatch
import glob
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from urllib.parse import urlparse

from flows.common.failure_codes import Failure
from flows.core.dataset import column_problem, dataset_uri, parquet_metadata
from flows.core.storage import Storage, file_uri

FIELD = "watch.files"
MAX_BYTES = 1 << 30  # 1 GiB of parquet: many times what eval.batches of rows need
MAX_FILES = 64  # a glob matching more is refused: the check reads each footer


@dataclass(frozen=True)
class SetProblem:
    problem: str
    fix: str
    code: Failure


@dataclass(frozen=True)
class TeamRoot:
    """One profile's output root and its team (None: the profile is in no team)."""

    profile: str
    team: str | None
    root: str


def _canonical(uri: str) -> str:
    """A URI compared by its place: a local path (plain or file://) with its links and
    ``..`` resolved."""
    parsed = urlparse(uri := dataset_uri(uri))
    if parsed.scheme == "file":
        return file_uri(os.path.realpath(parsed.path))
    return uri


def _under(uri: str, root: str) -> bool:
    root = _canonical(root).rstrip("/")
    return uri == root or uri.startswith(root + "/")


def foreign_root(uri: str, team: str | None, roots: Iterable[TeamRoot]) -> TeamRoot | None:
    """The other team's root ``uri`` lies under (pure), or None. A root the watching team
    also owns (a bucket two teams share, which the deploy already warns of) is not another
    team's alone, so it refuses nothing here."""
    place = _canonical(dataset_uri(uri).split("*", 1)[0])
    roots = list(roots)
    own = {_canonical(r.root).rstrip("/") for r in roots if r.team == team and team}
    for r in roots:
        if r.team is not None and r.team != team and _under(place, r.root) \
                and _canonical(r.root).rstrip("/") not in own:
            return r
    return None


def _matches(storage: Storage, uri: str) -> dict[str, int]:
    """The files ``uri`` names (a glob expanded) with their sizes; {} when none."""
    parsed = urlparse(uri)
    if "*" not in uri:
        stats = storage.stat_tree(uri)
        return {uri: stats[""].size} if "" in stats else \
            ({uri + "/": -1} if stats else {})  # -1: a directory's files, not one file
    if parsed.scheme == "file":
        return {file_uri(p): os.path.getsize(p) for p in sorted(glob.glob(parsed.path))
                if os.path.isfile(p)}
    base = uri.split("*", 1)[0].rsplit("/", 1)[0]
    return {f"{base}/{name}": stat.size for name, stat in sorted(storage.stat_tree(base).items())
            if fnmatch.fnmatchcase(f"{base}/{name}", uri)}


def watch_set_problem(storage: Storage, files: str, team: str | None,
                      roots: Callable[[], Iterable[TeamRoot]],
                      max_bytes: int = MAX_BYTES) -> SetProblem | None:
    """What is wrong with ``watch.files``, or None. ``roots`` is called only for a set in a
    bucket or on disk (it loads the teams file's profiles)."""
    uri = dataset_uri(files)
    if urlparse(uri).scheme == "hf":
        return None
    if (other := foreign_root(files, team, roots())) is not None:
        return SetProblem(
            f"{files} is under {other.root}, the output root of profile {other.profile} of team "
            f"{other.team}, not of {'team ' + team if team else 'a profile in no team'}",
            "copy the rows to your own bucket or directory and name them in watch.files",
            Failure.EVAL_WATCH_SET_FOREIGN)
    found = _matches(storage, uri)
    if not found:
        return SetProblem(f"{files} does not exist" + (" (the glob matches no file)"
                                                       if "*" in files else ""),
                          "point watch.files at existing parquet files (a local path, file:// "
                          "or gs:// URI), or remove it to watch on the promotion's held-out set",
                          Failure.DATA_INVALID)
    if any(size < 0 for size in found.values()):
        return SetProblem(f"{files} is a directory", "name its parquet files in watch.files, "
                          f"e.g. {files.rstrip('/')}/*.parquet", Failure.DATA_INVALID)
    if len(found) > MAX_FILES:
        return SetProblem(f"{files} matches {len(found)} files, more than {MAX_FILES}",
                          "merge the set into fewer parquet files", Failure.DATA_INVALID)
    total = sum(found.values())
    if total > max_bytes:
        return SetProblem(f"{files} holds {total:,} bytes, more than the watch reads "
                          f"({max_bytes:,})", "keep a sample of the rows in watch.files: the "
                          "watch scores eval.batches batches of them", Failure.DATA_INVALID)
    rows = 0
    for uri_one in found:
        try:
            meta = parquet_metadata(storage, uri_one)
        except (ValueError, FileNotFoundError) as exc:  # one gone since it was listed
            return SetProblem(f"{uri_one}: {exc}", "watch.files must name parquet files",
                              Failure.DATA_INVALID)
        if problem := column_problem(list(meta.schema.to_arrow_schema().names)):
            return SetProblem(f"{uri_one} {problem}", "rename the columns in the files "
                              "watch.files names (e.g. problem/expected_answer)",
                              Failure.DATA_INVALID)
        rows += int(meta.num_rows)
    if rows == 0:
        return SetProblem(f"{files} holds no row", "give watch.files rows to score",
                          Failure.DATA_INVALID)
    return None
