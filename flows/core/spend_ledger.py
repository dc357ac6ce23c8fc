"""The spend ledger: what each run of a team spent, kept under the teams file's
``ledger_root``, where only the flow writes (docs/decisions/0023-ledger-only-the-flow-writes.md
says why there and not beside the outputs, which every training pod may write).

Append-only, one object per entry, under ``<ledger root>/tpurl-spend/<team>/<YYYY-MM>/runs/
<run>/``. Why one object per entry and not one shared file: runs of a team write at the same
time from different machines, and a read-modify-write of one file loses whichever update
lands second; separate objects need no lock, and the reader sums them. An entry is created
only if its name is free (``Storage.create_text``: GCS ``ifGenerationMatch=0``, a hard link on
local files), named by run, stage, sequence and kind, so two writers never overwrite each
other: a writer that finds its name taken takes the next sequence.

Each (run, stage) has two kinds of entries: the plan's ``estimate``, written when the run
starts, and ``metered``, the stage's spend as the run measured it once the stage ended (the
run result's ``usd``/``chip_hours``; for a stage that failed, what its spend meters charged;
for a stage that never started, $0). The rule that keeps spend neither lost nor counted
twice (``final_spend``): a (run, stage) counts its metered figure when it has one, else its
estimate. A metered figure is the stage's whole spend so far, not an increment, so of
several metered entries the one with the highest sequence counts. A stage still running, or
one whose run died before its figure was written, counts its estimate: a team is never told
it has more left than it may.

Beside the entries, each run takes a place in its month's order (``order/<nnnnn>.json``,
``take_place``) once its estimates are written: the lowest free number, created only if free,
so a run holding a lower number created it before the other took its own, and its estimates
were in the ledger by then (flows/core/team_budget.py ``admitted_usd`` builds on it).

What the ledger holds is read as untrusted (``read_month``): an entry whose dollars or
chip-hours are negative or not finite, that names another team or month than the directory
it lies in, or whose run, stage, kind or sequence differ from its own object name, is
refused and named, never counted; so a metered entry replaces only the estimate of its own
run, filed beside it.

A run's entries are filed under the UTC month the run started in, so a run across midnight
of the month's last day charges one month, where its estimate was counted.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

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
    # never below 0 nor NaN or infinite: a negative figure would hand its team money, a NaN
    # one would make every comparison with the month false (no run starts, none is stopped)
    usd: float = Field(ge=0, allow_inf_nan=False)
    chip_hours: float = Field(ge=0, allow_inf_nan=False)
    kind: Kind
    time: str  # ISO 8601, UTC
    month: str  # YYYY-MM: the UTC month the run started in, which this entry charges
    sequence: int = Field(default=0, ge=0)
    run_name: str = ""


class Place(BaseModel):
    """A run's place in its month's order: the object ``order/<number>.json`` holds it."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    run: str
    team: str
    month: str
    time: str


@dataclass(frozen=True)
class MonthLedger:
    """A team's month as read: the entries that count, each run's place in the order (run →
    its lowest number), and what was refused (object → why)."""

    entries: tuple[LedgerEntry, ...] = ()
    order: dict[str, int] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)


def month_of(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m")


def now_iso() -> str:
    return datetime.now(UTC).isoformat()


def team_dir(team: str) -> str:
    """The team's directory name: its name when that is a safe file-name part, else the safe
    part with six hex digits of the name's digest, so two names never share a directory."""
    part = path_part(team, fallback="team")
    return part if part == team else f"{part}-{hashlib.sha256(team.encode()).hexdigest()[:6]}"


def team_ledger(root: str, team: str) -> str:
    """Everything of ``team`` under ``root``: the one place its flow may read and write
    (flows/backends/gke/identity_setup.py grants it there alone on a shared bucket)."""
    return join(root, LEDGER_DIR, team_dir(team))


def month_dir(root: str, team: str, month: str) -> str:
    return join(team_ledger(root, team), path_part(month))


def run_dir(root: str, entry: LedgerEntry) -> str:
    return join(month_dir(root, entry.team, entry.month), "runs", path_part(entry.run))


def entry_name(stage: str, sequence: int, kind: str) -> str:
    return f"{path_part(stage)}-{sequence:05d}-{kind}.json"


def entry_uri(root: str, entry: LedgerEntry, sequence: int) -> str:
    """``<root>/tpurl-spend/<team>/<month>/runs/<run>/<stage>-<seq>-<kind>.json``: the run id
    and stage keep writers of different runs apart, the sequence those of one run."""
    return join(run_dir(root, entry), entry_name(entry.stage, sequence, entry.kind))


def append(storage: Storage, root: str, entry: LedgerEntry) -> LedgerEntry:
    """Add ``entry`` as a new object under ``root``; returns it with the sequence it got.
    Starts after the sequences this run's stage already has and takes the next free one."""
    where = run_dir(root, entry)
    prefix = f"{path_part(entry.stage)}-"
    taken = [_sequence(name) for name in storage.children(where) if name.startswith(prefix)]
    sequence = max((s for s in taken if s is not None), default=-1) + 1
    while sequence < MAX_SEQUENCE:
        placed = entry.model_copy(update={"sequence": sequence})
        if storage.create_text(entry_uri(root, placed, sequence),
                               placed.model_dump_json(indent=1)):
            return placed
        sequence += 1
    raise RuntimeError(f"the ledger under {where} has {MAX_SEQUENCE} entries for stage "
                       f"{entry.stage}; a writer is looping")


def take_place(storage: Storage, root: str, team: str, month: str, run: str) -> int:
    """The run's number in the month's order: the lowest free one from the highest taken
    on, created only if free (a writer that loses the race takes the next)."""
    where = join(month_dir(root, team, month), "order")
    taken = [_number(name) for name in storage.children(where)]
    number = max((n for n in taken if n is not None), default=-1) + 1
    text = Place(run=run, team=team, month=month, time=now_iso()).model_dump_json()
    while number < MAX_SEQUENCE:
        if storage.create_text(join(where, f"{number:05d}.json"), text):
            return number
        number += 1
    raise RuntimeError(f"the order under {where} has {MAX_SEQUENCE} places; a writer is "
                       "looping")


def _sequence(name: str) -> int | None:
    """The sequence in ``<stage>-<seq>-<kind>.json``, or None for another name."""
    stem, _, suffix = name.rpartition("-")
    if suffix not in {f"{k}.json" for k in _KINDS}:
        return None
    digits = stem.rpartition("-")[2]
    return int(digits) if digits.isdigit() else None


def _number(name: str) -> int | None:
    stem, dot, suffix = name.partition(".")
    return int(stem) if dot and suffix == "json" and stem.isdigit() else None


def read_month(storage: Storage, root: str, team: str, month: str) -> MonthLedger:
    """Every entry and place of ``team`` under ``root`` for ``month``, in no particular order,
    each checked against where it lies (``entry_problem``); a half-written spare file (a dot
    name) is skipped, anything else that is no entry is refused, and named."""
    base = month_dir(root, team, month)
    entries: list[LedgerEntry] = []
    order: dict[str, int] = {}
    refused: dict[str, str] = {}
    for uri in storage.files_under(base):
        relative = uri[len(base):].strip("/")
        if relative.rsplit("/", 1)[-1].startswith("."):
            continue
        try:
            data = json.loads(storage.read_text(uri) or "")
        except ValueError as exc:
            refused[uri] = f"not JSON ({exc})"
            continue
        parts = relative.split("/")
        if parts[0] == "order" and len(parts) == 2 and (number := _number(parts[1])) is not None:
            if (problem := _place_problem(data, team, month)) is not None:
                refused[uri] = problem
            elif number < order.get(data["run"], MAX_SEQUENCE):
                order[data["run"]] = number
            continue
        if parts[0] != "runs" or len(parts) != 3:
            refused[uri] = "no ledger entry's name (runs/RUN/STAGE-SEQ-KIND.json)"
            continue
        try:
            entry = LedgerEntry.model_validate(data)
        except ValidationError as exc:
            refused[uri] = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}"
                                     for e in exc.errors())
            continue
        if (problem := entry_problem(entry, team, month, parts[1], parts[2])) is not None:
            refused[uri] = problem
            continue
        entries.append(entry)
    return MonthLedger(tuple(entries), order, refused)


def entry_problem(entry: LedgerEntry, team: str, month: str, run_part: str,
                  name: str) -> str | None:
    """Pure: why an entry found at ``runs/<run_part>/<name>`` in ``team``'s ``month`` is not
    counted, or None. Its figures are already checked by the model (finite, not negative)."""
    if entry.team != team:
        return f"names team {entry.team!r} in team {team!r}'s ledger"
    if entry.month != month:
        return f"names month {entry.month} in {month}'s ledger"
    if path_part(entry.run) != run_part:
        return f"names run {entry.run!r} but lies in run {run_part!r}'s directory"
    if name != entry_name(entry.stage, entry.sequence, entry.kind):
        return (f"its stage, sequence and kind ({entry.stage}, {entry.sequence}, "
                f"{entry.kind}) are not its name's")
    return None


def _place_problem(data: object, team: str, month: str) -> str | None:
    try:
        place = Place.model_validate(data)
    except ValidationError as exc:
        return f"no place in the order ({exc.error_count()} problem(s))"
    if place.team != team or place.month != month:
        return f"a place of team {place.team!r} in {place.month}, not {team!r} in {month}"
    return None


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
