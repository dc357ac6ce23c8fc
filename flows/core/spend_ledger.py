"""The spend ledger: what each run of a team spent, kept where the run writes its outputs.

Append-only, one object per entry, under ``<output root>/tpurl-spend/<YYYY-MM>/<run>/``: the
profile's bucket on GKE, the output root in the rehearsal. Why one object per entry and not
one shared file: runs of a team write at the same time from different machines, and a
read-modify-write of one file loses whichever update lands second; separate objects need no
lock, and the reader sums them. An entry is created only if its name is free
(``Storage.create_text``: GCS ``ifGenerationMatch=0``, a hard link on local files), named by
run, stage, sequence and kind, so two writers never overwrite each other: a writer that
finds its name taken takes the next sequence.

Each (run, stage) has two kinds of entries: the plan's ``estimate``, written before the
run's first TPU stage, and ``metered``, the stage's spend as the run measured it once the
stage ended (the run result's ``usd``/``chip_hours``; for a stage that failed, what its spend
meters charged). The rule that keeps spend neither lost nor
counted twice (``final_spend``): a (run, stage) counts its metered figure when it has one,
else its estimate. A metered figure is the stage's whole spend so far, not an increment, so
of several metered entries the one with the highest sequence counts (a write retried after
a lost reply, or a figure updated later, never adds up). A stage still running, or one whose
run died before its figure was written, counts its estimate: a team is never told it has
more left than it may.

A run's entries are filed under the UTC month the run started in, so a run across midnight
of the month's last day charges one month, where its estimate was counted.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from flows.common.paths import path_part
from flows.core.storage import Storage, join

LEDGER_DIR = "tpurl-spend"
Kind = Literal["estimate", "metered"]
_KINDS: tuple[Kind, ...] = ("estimate", "metered")
MAX_SEQUENCE = 10_000  # a writer that finds this many names taken is looking at a bug


class LedgerEntry(BaseModel):
    """One line of the ledger: what one stage of one run spent (or is estimated to)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    team: str
    profile: str
    run: str  # the flow run's id (unique); ``run_name`` is the one people read
    stage: str
    capacity: str  # the capacity mode the figure is priced at (rehearsal: "local")
    usd: float
    chip_hours: float
    kind: Kind
    time: str  # ISO 8601, UTC
    month: str  # YYYY-MM: the UTC month the run started in, which this entry charges
    sequence: int = 0
    run_name: str = ""


def month_of(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m")


def now_iso() -> str:
    return datetime.now(UTC).isoformat()


def month_dir(root: str, month: str) -> str:
    return join(root, LEDGER_DIR, month)


def entry_uri(root: str, entry: LedgerEntry, sequence: int) -> str:
    """``<root>/tpurl-spend/<month>/<run>/<stage>-<seq>-<kind>.json``: the run id and stage
    keep writers of different runs apart, the sequence those of one run."""
    return join(month_dir(root, entry.month), path_part(entry.run),
                f"{path_part(entry.stage)}-{sequence:05d}-{entry.kind}.json")


def append(storage: Storage, root: str, entry: LedgerEntry) -> LedgerEntry:
    """Add ``entry`` as a new object under ``root``; returns it with the sequence it got.
    Starts after the sequences this run's stage already has and takes the next free one."""
    run_dir = join(month_dir(root, entry.month), path_part(entry.run))
    prefix = f"{path_part(entry.stage)}-"
    taken = [_sequence(name) for name in storage.children(run_dir) if name.startswith(prefix)]
    sequence = max((s for s in taken if s is not None), default=-1) + 1
    while sequence < MAX_SEQUENCE:
        placed = entry.model_copy(update={"sequence": sequence})
        if storage.create_text(entry_uri(root, placed, sequence),
                               placed.model_dump_json(indent=1)):
            return placed
        sequence += 1
    raise RuntimeError(f"the ledger under {run_dir} has {MAX_SEQUENCE} entries for stage "
                       f"{entry.stage}; a writer is looping")


def _sequence(name: str) -> int | None:
    """The sequence in ``<stage>-<seq>-<kind>.json``, or None for another name."""
    stem, _, suffix = name.rpartition("-")
    if suffix not in {f"{k}.json" for k in _KINDS}:
        return None
    digits = stem.rpartition("-")[2]
    return int(digits) if digits.isdigit() else None


def read_month(storage: Storage, root: str, month: str) -> list[LedgerEntry]:
    """Every entry under ``root`` for ``month``, in no particular order. A half-written
    spare file (a dot name) or a file that is no entry is skipped, never guessed at."""
    entries = []
    for uri in storage.files_under(month_dir(root, month)):
        name = uri.rsplit("/", 1)[-1]
        if name.startswith(".") or _sequence(name) is None:
            continue
        text = storage.read_text(uri)
        try:
            entries.append(LedgerEntry.model_validate(json.loads(text or "")))
        except (ValueError, ValidationError):
            continue
    return entries


def final_spend(entries: Iterable[LedgerEntry]) -> dict[tuple[str, str], LedgerEntry]:
    """Pure: the entry that counts for each (run, stage): its metered figure of the highest
    sequence, else its estimate of the highest sequence. The order entries are read in
    does not matter."""
    best: dict[tuple[str, str], LedgerEntry] = {}
    for entry in entries:
        key = (entry.run, entry.stage)
        held = best.get(key)
        if held is None or _rank(entry) > _rank(held):
            best[key] = entry
    return best


def _rank(entry: LedgerEntry) -> tuple[int, int, str]:
    return (_KINDS.index(entry.kind), entry.sequence, entry.time)


def total_usd(entries: Iterable[LedgerEntry]) -> float:
    """Pure: the month's dollars by the rule of ``final_spend``."""
    return sum(e.usd for e in final_spend(entries).values())
