"""Names built from untrusted text become one safe path part: a run name carrying
an announced revision ``../../x`` must not write the result and traceback files four
directories above their place. Property-tested over any text, then against real files."""

from __future__ import annotations

import types
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flows.announcements.model import Announcement, RunAnnouncement, retrain_run_name
from flows.common.paths import path_part
from flows.config import load_profile
from flows.core.storage import LocalStorage
from flows.run.result import PipelineResult, persist_result


def _safe(part: str) -> None:
    assert part and "/" not in part and "\\" not in part and ".." not in part
    assert not part.startswith((".", "-")) and part.isprintable() and " " not in part


@given(st.text())
def test_any_text_becomes_one_safe_part(text: str) -> None:
    _safe(path_part(text))


@given(st.text(), st.text())
def test_any_announced_revision_and_file_name_give_a_safe_run_name(revision: str,
                                                                   name: str) -> None:
    now = datetime.now(UTC)
    record = RunAnnouncement({"dataset": Announcement("dataset", f"gs://b/{name}", "e1", now),
                              "base-model": Announcement("base-model", revision, "e2", now)}, ())
    _safe(retrain_run_name("rehearsal", record, "20250601"))


def test_ordinary_names_are_kept() -> None:
    assert path_part("rehearsal-v3.parquet+rev-0123456789ab-20250601") == \
        "rehearsal-v3.parquet+rev-0123456789ab-20250601"
    assert path_part("rl-3f2a9c") == "rl-3f2a9c"


def _tree(root: Path) -> set[Path]:
    return {p for p in root.rglob("*")}


@pytest.mark.parametrize("run_name", ["../../x", "../../../../x", "/etc/x", "a/../../..",
                                      "\x1b[2J..\n"])
def test_a_hostile_run_name_writes_its_result_in_its_place(tmp_path: Path,
                                                           run_name: str) -> None:
    root = tmp_path / "a" / "b" / "c" / "root"
    profile = load_profile("rehearsal", {"local.root": str(root)}, environ={})
    now = datetime.now(UTC).isoformat()
    result = PipelineResult(profile="rehearsal", backend="local", artifacts={}, stages=[],
                            chip_hours=0.0, metrics={}, wall_s=1.0, started_at=now,
                            finished_at=now)
    uri = persist_result(LocalStorage(), profile, run_name, result)
    place = root / "tpurl-results" / "rehearsal"
    written = {p for p in _tree(tmp_path) if p.is_file()}
    assert {p.parent for p in written} == {place}, written
    assert uri.startswith(place.as_uri() + "/")


def test_a_hostile_run_name_keeps_its_traceback_in_the_cache(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import flows.pipeline as pipeline
    from flows.core.secrets import Redactor

    cache = tmp_path / "deep" / "er" / "cache"
    monkeypatch.setenv("TPURL_CACHE_DIR", str(cache))
    # what prefect.runtime.flow_run.name answers inside a run named by a hostile revision
    monkeypatch.setattr(pipeline, "flow_run", types.SimpleNamespace(name="rev-../../../../x"))
    path = pipeline._keep_traceback("../train", RuntimeError("boom"), Redactor())
    assert path is not None and Path(path).parent == cache / "errors"
    assert {p for p in _tree(tmp_path) if p.is_file()} == {Path(path)}
