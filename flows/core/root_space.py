"""Whether the output root can take the run: writable, and free space for what the stages
that will run write. Checked at `tpurl validate`, `plan` and before `run` starts anything.

The estimates are for the local rehearsal (its tiny model; GCS has no size limit worth
checking). They are computed, not measured: parameters × bytes per value of each output,
with a 25 % margin; the tiny model has about 58 M parameters (images/rehearsal/
make_tiny_model.py). A stage whose output directory already exists is counted as needing
nothing more (a rerun of the same config skips it, or resumes in place).

It needs the layout (where each stage writes), so it stands apart from the leaf that does
the writes themselves (flows/core/safe_writes.py); :func:`storage_failure` turns that
leaf's :class:`~flows.core.safe_writes.DiskFull` into the storage error.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlparse

from flows.common.failure_codes import Failure
from flows.common.issues import Issue
from flows.config.profile import Profile
from flows.core.failures import Diagnosis, FailureCategory, StageFailed, storage_error
from flows.core.layout import Layout
from flows.core.safe_writes import FULL_ERRNOS, DiskFull, describe, existing_ancestor, gib

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
    layout = Layout(profile)
    return {"infra": _local(layout.sources_dir), "convert": _local(layout.convert_dir),
            "train": _local(layout.train_run_dir), "export": _local(layout.export_dir)}


def root_issues(profile: Profile) -> list[Issue]:
    """Why ``local.root`` cannot take this run (read-only, not writable, too small)."""
    if profile.local is None:
        return []
    root = _local(Layout(profile).root)
    where = existing_ancestor(root)
    stat = os.statvfs(where)
    if stat.f_flag & os.ST_RDONLY:
        return [Issue("local.root", f"{root} is on a read-only file system (at {where})",
                      "point local.root at a writable directory, or remount it read-write",
                      Failure.CONFIG_ROOT_READ_ONLY)]
    if not os.access(where, os.W_OK):
        return [Issue("local.root", f"{where} is not writable by this user",
                      f"fix {where}'s owner/mode, or point local.root elsewhere",
                      Failure.CONFIG_ROOT_NOT_WRITABLE)]
    dirs = _stage_dirs(profile)
    needed = {s: b for s, b in stage_estimates(profile).items() if not dirs[s].exists()}
    free = stat.f_bavail * stat.f_frsize
    if sum(needed.values()) <= free:
        return []
    each = ", ".join(f"{s} {gib(b)}" for s, b in needed.items())
    return [Issue("local.root", f"{where} has {gib(free)} free; the stages that will run need "
                  f"about {gib(sum(needed.values()))} ({each}; estimated from the tiny "
                  "model's size)", f"free space there, or point local.root at a disk with "
                  f"{gib(sum(needed.values()))} free", Failure.CONFIG_ROOT_TOO_SMALL)]


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
        Failure.STORAGE_ENOSPC)



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
    return Layout(profile).root
