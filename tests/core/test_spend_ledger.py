"""The spend ledger (flows/core/spend_ledger.py): one object per entry, written only where the
name is free, so concurrent writers (threads, processes, GCS clients) lose nothing and
overwrite nothing; and the rule by which the month's total is what each (run, stage)
finally spent: its metered figure replaces its estimate, whatever order the entries were
written or are read in. Real local files and a real fake-gcs-server; no fake storage."""

from __future__ import annotations

import multiprocessing
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flows.common.paths import file_uri
from flows.core.spend_ledger import (
    LedgerEntry,
    append,
    entry_uri,
    final_spend,
    read_month,
    take_place,
    total_usd,
)
from flows.core.storage import LocalStorage, Storage
from tests.support.gcs import GCS_BUCKET

MONTH = "2026-12"
STAGES = ("convert", "train", "export", "evaluate")


def _entry(run: str, stage: str, kind: str, usd: float, team: str = "t") -> LedgerEntry:
    return LedgerEntry.model_validate({
        "team": team, "profile": "p", "run": run, "stage": stage, "capacity": "on-demand",
        "usd": usd, "chip_hours": usd / 2.7, "kind": kind, "time": "2026-12-06T01:00:00+00:00",
        "month": MONTH})


# --- the rule ---------------------------------------------------------------------------
def test_a_metered_figure_replaces_the_estimate_of_its_run_and_stage() -> None:
    entries = [_entry("a", "train", "estimate", 100.0).model_copy(update={"sequence": 0}),
               _entry("a", "train", "metered", 80.0).model_copy(update={"sequence": 1}),
               _entry("a", "export", "estimate", 10.0),  # still running: its estimate counts
               _entry("b", "train", "metered", 5.0)]
    assert total_usd(entries) == pytest.approx(80.0 + 10.0 + 5.0)
    assert final_spend(entries)[("a", "train")].kind == "metered"


def test_of_several_metered_figures_the_latest_counts_never_their_sum() -> None:
    """A metered figure is the stage's whole spend: a write retried after a lost reply, or
    a later figure, replaces it."""
    first = _entry("a", "train", "metered", 50.0).model_copy(update={"sequence": 1})
    again = _entry("a", "train", "metered", 50.0).model_copy(update={"sequence": 2})
    later = _entry("a", "train", "metered", 70.0).model_copy(update={"sequence": 3})
    assert total_usd([first, again]) == 50.0
    assert total_usd([later, first, again]) == 70.0
    # an estimate written late (a slow writer) never displaces the metered figure
    late = _entry("a", "train", "estimate", 999.0).model_copy(update={"sequence": 9})
    assert total_usd([first, late]) == 50.0


# a stage's story: its estimate, then zero or more metered figures, each the whole so far
stage_story = st.tuples(st.sampled_from(STAGES), st.integers(0, 500),
                        st.lists(st.integers(0, 500), max_size=3))
runs = st.dictionaries(st.sampled_from(["r1", "r2", "r3", "r4"]),
                       st.lists(stage_story, min_size=1, max_size=4, unique_by=lambda s: s[0]),
                       min_size=1)


def _writes(plan: dict[str, list[tuple[str, int, list[int]]]]) -> list[list[LedgerEntry]]:
    """Each (run, stage)'s writes in its own order: the estimate first, then each metered."""
    return [[_entry(run, stage, "estimate", float(est)),
             *(_entry(run, stage, "metered", float(m)) for m in metered)]
            for run, stages in plan.items() for stage, est, metered in stages]


def _expected(plan: dict[str, list[tuple[str, int, list[int]]]]) -> float:
    """What each stage finally spent: its last metered figure, or its estimate if none."""
    return sum(float(metered[-1] if metered else est)
               for stages in plan.values() for _, est, metered in stages)


@settings(max_examples=60, deadline=None)
@given(plan=runs, order=st.randoms(use_true_random=False), data=st.data())
def test_any_interleaving_of_writers_totals_what_each_stage_finally_spent(
        plan: dict[str, list[tuple[str, int, list[int]]]], order, data, tmp_path_factory) -> None:
    """Writers of different runs and stages interleave in any order (each keeps its own);
    the reader, in any order too, finds the sum of every stage's final figure: nothing lost,
    nothing twice."""
    root = file_uri(tmp_path_factory.mktemp("ledger"))
    storage = LocalStorage()
    queues = _writes(plan)
    while queues:
        queue = queues[data.draw(st.integers(0, len(queues) - 1))]
        append(storage, root, queue.pop(0))
        queues = [q for q in queues if q]
    entries = list(read_month(storage, root, "t", MONTH).entries)
    order.shuffle(entries)
    assert len(entries) == sum(1 + len(m) for s in plan.values() for _, _, m in s)
    assert total_usd(entries) == pytest.approx(_expected(plan))


# --- concurrent writers -----------------------------------------------------------------
def _write_many(root: str, writer: int, count: int) -> None:
    """One writer's entries: its own run's stages, and the same shared run and stage every
    writer also writes (the names collide; no entry may be lost)."""
    storage = LocalStorage() if root.startswith("file://") else _gcs()
    for n in range(count):
        append(storage, root, _entry(f"run-{writer}", STAGES[n % 4], "metered", 1.0))
        append(storage, root, _entry("shared", "train", "estimate", 1.0))


def _gcs() -> Storage:
    import os

    from flows.backends.gke.gcs import GcsStorage
    from tests.support.gcs import gcs_client

    return GcsStorage(gcs_client(os.environ["STORAGE_EMULATOR_HOST"], "test-project"))


def _check_all_there(storage: Storage, root: str, writers: int, count: int) -> None:
    entries = read_month(storage, root, "t", MONTH).entries
    shared = [e for e in entries if e.run == "shared"]
    assert len(shared) == writers * count  # every colliding writer got its own name
    assert sorted(e.sequence for e in shared) == list(range(writers * count))
    assert len(entries) == 2 * writers * count
    # per writer's run: the four stages' latest metered figures count once each
    assert total_usd(e for e in entries if e.run != "shared") == writers * min(count, 4)


def _threads(target: Callable[[], None], n: int) -> None:
    threads = [threading.Thread(target=target) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def test_threads_on_local_files_lose_and_overwrite_nothing(tmp_path: Path) -> None:
    root = file_uri(tmp_path)
    counter = iter(range(100))
    _threads(lambda: _write_many(root, next(counter), 6), 8)
    _check_all_there(LocalStorage(), root, 8, 6)
    assert not [p for p in tmp_path.rglob(".*")]  # no spare file left behind


def _processes(root: str, writers: int, each: int) -> None:
    """``writers`` spawned processes, each writing ``each`` entries under ``root``."""
    spawn = multiprocessing.get_context("spawn")
    procs = [spawn.Process(target=_write_many, args=(root, w, each)) for w in range(writers)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0


def test_processes_on_local_files_lose_and_overwrite_nothing(tmp_path: Path) -> None:
    root = file_uri(tmp_path)
    _processes(root, 4, 5)
    _check_all_there(LocalStorage(), root, 4, 5)


def test_a_taken_name_is_refused_on_local_files(tmp_path: Path) -> None:
    storage, uri = LocalStorage(), file_uri(tmp_path / "x.json")
    assert storage.create_text(uri, "first") and not storage.create_text(uri, "second")
    assert storage.read_text(uri) == "first"


def test_gcs_refuses_a_taken_name_with_its_generation_precondition(store) -> None:
    """ifGenerationMatch=0 on fake-gcs-server: the second create of a name is a 412, and
    the first object stays as it was."""
    uri = f"gs://{GCS_BUCKET}/tpurl-spend/x.json"
    assert store.create_text(uri, "first") and not store.create_text(uri, "second")
    assert store.read_text(uri) == "first"


def test_threads_on_fake_gcs_lose_and_overwrite_nothing(store) -> None:
    root = f"gs://{GCS_BUCKET}"
    counter = iter(range(100))
    _threads(lambda: _write_many(root, next(counter), 3), 6)
    _check_all_there(store, root, 6, 3)


def test_processes_on_fake_gcs_lose_and_overwrite_nothing(store) -> None:
    root = f"gs://{GCS_BUCKET}"
    _processes(root, 3, 3)
    _check_all_there(store, root, 3, 3)


def test_entries_are_named_by_run_stage_sequence_and_kind(tmp_path: Path) -> None:
    root = file_uri(tmp_path)
    placed = append(LocalStorage(), root, _entry("flow-run-id", "train", "estimate", 1.0))
    assert entry_uri(root, placed, placed.sequence).endswith(
        "/tpurl-spend/t/2026-12/runs/flow-run-id/train-00000-estimate.json")


# --- places in the month's order --------------------------------------------------------
def _take_places(storage: Storage, root: str, runs: list[str]) -> None:
    counter = iter(runs)
    _threads(lambda: take_place(storage, root, "t", MONTH, next(counter)), len(runs))
    order = read_month(storage, root, "t", MONTH).order
    assert sorted(order) == sorted(runs)  # every run got a place
    assert sorted(order.values()) == list(range(len(runs)))  # each its own number


def test_runs_racing_for_places_each_get_their_own_on_local_files(tmp_path: Path) -> None:
    _take_places(LocalStorage(), file_uri(tmp_path), [f"run-{n}" for n in range(8)])


def test_runs_racing_for_places_each_get_their_own_on_fake_gcs(store) -> None:
    _take_places(store, f"gs://{GCS_BUCKET}", [f"run-{n}" for n in range(6)])


def test_a_place_of_another_team_or_month_is_refused(tmp_path: Path) -> None:
    root, storage = file_uri(tmp_path), LocalStorage()
    take_place(storage, root, "t", MONTH, "mine")
    forged = f"{root}/tpurl-spend/t/{MONTH}/order/00001.json"
    storage.create_text(forged, '{"run": "x", "team": "u", "month": "2026-12", "time": ""}')
    read = read_month(storage, root, "t", MONTH)
    assert read.order == {"mine": 0} and "a place of team 'u'" in read.refused[forged]
