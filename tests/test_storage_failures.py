"""A file system that refuses writes is diagnosed, in one message with the path and the fix,
on a real read-only file system (a tmpfs remounted read-only) through the flow's own stage
runner; the full traceback is kept in a file."""

from __future__ import annotations

import errno
from collections.abc import Iterator
from pathlib import Path

import pytest
from prefect import flow

from flows.config import load_profile
from flows.core.failures import FailureCategory, StageFailed, storage_error
from flows.core.stage import StageOutput
from tests.support.tmpfs import mounted_tmpfs

pytestmark = pytest.mark.usefixtures("prefect_api")


@pytest.fixture
def read_only_root(tmp_path: Path) -> Iterator[Path]:
    with mounted_tmpfs(tmp_path / "ro", "size=1m,ro") as root:
        yield root


def test_a_read_only_output_root_is_one_diagnosed_message(read_only_root: Path, tmp_path,
                                                         monkeypatch) -> None:
    from flows import pipeline

    monkeypatch.setenv("TPURL_CACHE_DIR", str(tmp_path / "cache"))
    profile = load_profile("rehearsal", {"local.root": str(read_only_root)}, environ={})
    image = StageOutput(stage="image", status="skipped", key="k", fingerprint="f", uris={})

    @flow
    def one_stage() -> None:
        pipeline._execute("infra", profile, {"image": image})

    with pytest.raises(StageFailed) as failed:
        one_stage()
    diagnosis = failed.value.diagnosis
    assert diagnosis.category is FailureCategory.USER_ERROR and diagnosis.code == "storage/EROFS"
    assert str(read_only_root) in diagnosis.summary and "Read-only file system" in diagnosis.summary
    assert "local.root" in diagnosis.fix
    kept = next((tmp_path / "cache" / "errors").glob("*-infra.log"))
    assert "Traceback" in kept.read_text() and str(kept) in diagnosis.detail
    assert "Traceback" not in diagnosis.detail


@pytest.mark.parametrize(("code", "category"), [
    (errno.ENOSPC, FailureCategory.USER_ERROR), (errno.EACCES, FailureCategory.USER_ERROR),
    (errno.EDQUOT, FailureCategory.USER_ERROR)])
def test_refusals_of_the_file_system_are_the_users_to_fix(code: int, category) -> None:
    failure = storage_error("train", OSError(code, "refused", "/data/x"), None)
    assert failure is not None and failure.diagnosis.category is category
    assert "/data/x" in failure.diagnosis.summary


def test_other_os_errors_stay_internal() -> None:
    assert storage_error("train", OSError(errno.EBADF, "bad fd", "/x"), None) is None
    assert storage_error("train", OSError(errno.ENOSPC, "full"), None) is None  # no path


def test_a_refused_file_is_named_as_a_file(tmp_path: Path) -> None:
    """An unreadable lineage record names the file, not the directory's mode."""
    record = tmp_path / "lineage.json"
    record.write_text("{}")
    failure = storage_error("convert", PermissionError(errno.EACCES, "Permission denied",
                                                        str(record)), None)
    assert failure is not None
    assert failure.diagnosis.summary.startswith(f"cannot access {record}")
    assert f"no permission for {record}: fix that file's owner/mode" in \
        failure.diagnosis.fix
