"""Whether the output root can take the run: writable, and free space for what the stages
that will run write. Checked at `tpurl validate`, `plan` and before `run` starts anything.

The estimates are for the local rehearsal (its tiny model; GCS has no size limit worth
checking). They are computed, not measured: parameters × bytes per value of each output,
with a 25 % margin; the tiny model has about 58 M parameters (images/rehearsal/
make_tiny_model.py). A stage whose output directory already exists is counted as needing
nothing more (a rerun of the same config skips it, or resumes in place).

Our own writes (lineage records, results, logs, plans, pid tags, the files infra and the
image stage write) go through :func:`write_text` / :func:`writing` here, so a full disk is
one :class:`DiskFull` naming the path, what it was and the free space, which
:func:`storage_failure` turns into the storage error; no write site wraps its own.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO
from urllib.parse import urlparse

from flows.common.issues import Issue
from flows.config.profile import Profile
from flows.core.failures import Diagnosis, FailureCategory, StageFailed, storage_error

TINY_PARAMS = 58_000_000
MARGIN = 1.25
# bytes per parameter each stage writes (MaxText 0.2.4 defaults and the rehearsal profile):
# infra: the tiny HF model in bfloat16 (2) plus the dataset (counted in the margin);
# convert: the MaxText checkpoint in base.yml's weight_dtype float32 (4);
# train: per checkpoint (checkpoint_period 1, one per step) the bfloat16 params (2) and
# AdamW's mu and nu, which inherit weight_dtype (2 + 2), rl.yml's bfloat16;
# export: bfloat16 safetensors (export.args.weight_dtype, 2).
BYTES_PER_PARAM = {"infra": 2, "convert": 4, "train_per_step": 6, "export": 2}


def _local(uri: str) -> Path:
    return Path(urlparse(uri).path)


def stage_estimates(profile: Profile) -> dict[str, int]:
    """Bytes each stage writes under the output root (local backend; {} otherwise)."""
    if profile.local is None:
        return {}
    steps = int(profile.train.args.get("num_batches", 1) or 1)
    per = {"infra": BYTES_PER_PARAM["infra"], "convert": BYTES_PER_PARAM["convert"],
           "train": BYTES_PER_PARAM["train_per_step"] * steps, "export": BYTES_PER_PARAM["export"]}
    return {stage: int(TINY_PARAMS * b * MARGIN) for stage, b in per.items()}


def _stage_dirs(profile: Profile) -> dict[str, Path]:
    from flows.core.layout import Layout

    layout = Layout(profile)
    return {"infra": _local(layout.sources_dir), "convert": _local(layout.convert_dir),
            "train": _local(layout.train_run_dir), "export": _local(layout.export_dir)}


def _existing_ancestor(path: Path) -> Path:
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def gib(size: float) -> str:
    return f"{size / 2**30:.2f} GiB"


def root_issues(profile: Profile) -> list[Issue]:
    """Why ``local.root`` cannot take this run (read-only, not writable, too small)."""
    if profile.local is None:
        return []
    from flows.core.layout import Layout

    root = _local(Layout(profile).root)
    where = _existing_ancestor(root)
    stat = os.statvfs(where)
    if stat.f_flag & os.ST_RDONLY:
        return [Issue("local.root", f"{root} is on a read-only file system (at {where})",
                      "point local.root at a writable directory, or remount it read-write",
                      "config/root-read-only")]
    if not os.access(where, os.W_OK):
        return [Issue("local.root", f"{where} is not writable by this user",
                      f"fix {where}'s owner/mode, or point local.root elsewhere",
                      "config/root-not-writable")]
    dirs = _stage_dirs(profile)
    needed = {s: b for s, b in stage_estimates(profile).items() if not dirs[s].exists()}
    free = stat.f_bavail * stat.f_frsize
    if sum(needed.values()) <= free:
        return []
    each = ", ".join(f"{s} {gib(b)}" for s, b in needed.items())
    return [Issue("local.root", f"{where} has {gib(free)} free; the stages that will run need "
                  f"about {gib(sum(needed.values()))} ({each}; estimated from the tiny "
                  "model's size)", f"free space there, or point local.root at a disk with "
                  f"{gib(sum(needed.values()))} free", "config/root-too-small")]


_NO_SPACE = ("No space left on device", "[Errno 28]", "ENOSPC")


def no_space_diagnosis(workload: str, tail: list[str], stage_dir: Path, free: int,
                       needed: int | None, removed: int,
                       kept: str = "its logs are kept") -> Diagnosis | None:
    """Pure: a program that stopped because the disk filled up, as the storage error (what
    was being written, where, free and needed space, what was cleaned up, the fix); None
    when the log tail shows no such failure."""
    line = next((ln.strip() for ln in reversed(tail) if any(m in ln for m in _NO_SPACE)), None)
    if line is None:
        return None
    path = line.rsplit(": ", 1)[-1].strip("'\"") if ": '" in line or ': "' in line else \
        str(stage_dir)
    want = f"; the stage needs about {gib(needed)}" if needed else ""
    return Diagnosis(
        FailureCategory.USER_ERROR,
        f"{workload} ran out of disk space writing {path} ({gib(free)} free now{want})",
        f"    {line}\n    removed {removed} partial file(s) of this attempt from {stage_dir} "
        f"({kept})",
        "free space under local.root (old output keys can go) or point local.root at a "
        f"larger disk{f' with {gib(needed)} free' if needed else ''}; then run again",
        "storage/ENOSPC")


def free_bytes(path: Path) -> int:
    stat = os.statvfs(_existing_ancestor(path))
    return stat.f_bavail * stat.f_frsize


# --- our own writes ------------------------------------------------------------------------

FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


class DiskFull(OSError):
    """A write of ours that the file system refused for lack of space (ENOSPC, EDQUOT): the
    path, what was being written and the free space at that moment, so the failure can say
    what to free instead of showing a traceback."""

    def __init__(self, cause: OSError, path: Path, what: str, size: int | None) -> None:
        code = cause.errno or errno.ENOSPC
        super().__init__(code, cause.strerror or os.strerror(code), str(path))
        self.what, self.size, self.free = what, size, free_bytes(path)


def describe(path: Path) -> str:
    """Pure: what a file of ours is, by its name (for a write site that did not say)."""
    if path.name == "tpurl-lineage.json":
        return "the stage's lineage record"
    if "tpurl-results" in path.parts:
        return "the run's result"
    if "tpurl-logs" in path.parts:
        return "a program's log" if path.suffix == ".log" else "a program's pid tag"
    return "a file of the pipeline's"


@contextlib.contextmanager
def writing(path: Path, what: str | None = None, size: int | None = None) -> Iterator[None]:
    """Around a write of ours: a full disk becomes :class:`DiskFull` for ``path``."""
    try:
        yield
    except DiskFull:
        raise
    except OSError as exc:
        if exc.errno not in FULL_ERRNOS:
            raise
        raise DiskFull(exc, path, what or describe(path), size) from exc


def write_text(path: Path, text: str, what: str | None = None) -> None:
    """Atomically (a reader never sees half a record); on failure the temporary goes, so a
    full disk keeps no partial file of ours."""
    tmp = path.with_name(path.name + ".tmp")
    with writing(path, what, len(text.encode())):
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            tmp.write_text(text)
            tmp.replace(path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise


class LineLog:
    """A log written line by line that, when the disk fills, stops writing instead of
    raising: the program it records keeps running to its own end (its own failure says more
    than ours would), and ``full`` says the log is incomplete and why."""

    def __init__(self, path: Path, what: str | None = None) -> None:
        self.path, self.what = path, what
        self.full: DiskFull | None = None
        with writing(path, what):
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file: TextIO = open(path, "w")  # noqa: SIM115 (closed in close())

    def write(self, line: str) -> None:
        if self.full is not None:
            return
        try:
            with writing(self.path, self.what):
                self._file.write(line + "\n")
        except DiskFull as exc:
            self.full = exc
            with contextlib.suppress(OSError):
                self._file.close()

    def close(self) -> None:
        if self.full is None:
            try:
                with writing(self.path, self.what):
                    self._file.close()
            except DiskFull as exc:
                self.full = exc


def storage_failure(stage: str, exc: OSError, traceback_file: str | None,
                    profile: Profile | None = None) -> StageFailed | None:
    """The storage error for an OSError a stage (or the run) raised; None when it is not a
    refusal of the file system. A full disk states what was written, where, the free space
    and what the stage needs; one raised by a write not routed through here (no path) is
    placed at the output root."""
    needed = stage_estimates(profile).get(stage) if profile is not None else None
    if isinstance(exc, DiskFull):
        return storage_error(stage, exc, traceback_file, what=exc.what, free=exc.free,
                             needed=needed or exc.size)
    if exc.errno in FULL_ERRNOS:
        path = Path(str(exc.filename)) if exc.filename else (
            _local(_root(profile)) if profile is not None and profile.local else None)
        if path is None:
            return None
        full = DiskFull(exc, path, describe(path), None)
        return storage_error(stage, full, traceback_file, what=full.what, free=full.free,
                             needed=needed)
    return storage_error(stage, exc, traceback_file)


def _root(profile: Profile) -> str:
    from flows.core.layout import Layout

    return Layout(profile).root
