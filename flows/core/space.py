"""Whether the output root can take the run: writable, and free space for what the stages
that will run write. Checked at `tpurl validate`, `plan` and before `run` starts anything.

The estimates are for the local rehearsal (its tiny model; GCS has no size limit worth
checking). They are computed, not measured: parameters × bytes per value of each output,
with a 25 % margin; the tiny model has about 58 M parameters (images/rehearsal/
make_tiny_model.py). A stage whose output directory already exists is counted as needing
nothing more (a rerun of the same config skips it, or resumes in place).
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlparse

from flows.common.issues import Issue
from flows.config.profile import Profile
from flows.core.failures import Diagnosis, FailureCategory

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
                       needed: int | None, removed: int) -> Diagnosis | None:
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
        "(its logs are kept)",
        "free space under local.root (old output keys can go) or point local.root at a "
        f"larger disk{f' with {gib(needed)} free' if needed else ''}; then run again",
        "storage/ENOSPC")


def free_bytes(path: Path) -> int:
    stat = os.statvfs(_existing_ancestor(path))
    return stat.f_bavail * stat.f_frsize
