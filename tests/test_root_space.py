"""`tpurl validate`, `plan` and `run` refuse an output root that is read-only or too small
for the stages that will run, before anything starts: real `tpurl` processes, a real small
tmpfs (issue 20.3, 20.4)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from flows.common.paths import REPO_ROOT

TPURL = str(Path(sys.executable).with_name("tpurl"))


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mount)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=False)


def _tpurl(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    return subprocess.run([TPURL, *args], cwd=REPO_ROOT, env=env, capture_output=True,
                          text=True, timeout=300, check=False)


@pytest.mark.parametrize("command", ["validate", "plan", "run"])
def test_a_root_without_the_space_is_refused_with_the_estimate(small_fs: Path, command: str):
    done = _tpurl(command, "rehearsal", "--set", f"local.root={small_fs}/out")
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"local.root: {small_fs} has 0.06 GiB free" in done.stderr
    for stage in ("infra", "convert", "train", "export"):
        assert f"{stage} 0." in done.stderr  # each stage's estimate is stated
    assert "Starting temporary server" not in done.stdout + done.stderr  # before anything
    assert not (small_fs / "out").exists()


def test_a_read_only_root_is_refused_at_validation(small_fs: Path):
    subprocess.run(["mount", "-o", "remount,ro", str(small_fs)], check=True)
    done = _tpurl("validate", "rehearsal", "--set", f"local.root={small_fs}/out")
    assert done.returncode == 2 and "is on a read-only file system" in done.stderr


def test_plan_states_the_estimate_per_stage():
    done = _tpurl("plan", "rehearsal")
    assert done.returncode == 0, done.stderr
    assert "disk under local.root (estimated): infra 0.14 GiB, convert 0.27 GiB, train " \
           "0.81 GiB, export 0.14 GiB" in done.stdout


FILL = """
import os, sys
os.makedirs(sys.argv[1], exist_ok=True)
with open(os.path.join(sys.argv[1], "shard-0.bin"), "wb") as out:
    while True:
        out.write(b"x" * (1 << 20))
        out.flush()
"""


def test_a_program_that_fills_the_disk_is_the_storage_error_and_leaves_room(small_fs: Path):
    """A real program writes until the real tmpfs is full (ENOSPC): one storage diagnosis
    naming what was written, free and needed space and the fix, and the attempt's partial
    files are gone so the file system is not left full."""
    from flows.backends.local.backend import LocalBackend
    from flows.config import load_profile
    from flows.core.failures import StageFailed
    from flows.core.storage import file_uri

    profile = load_profile("rehearsal", {"local.root": str(small_fs / "out")}, environ={})
    backend = LocalBackend(profile, stage="convert")
    stage_dir = small_fs / "out" / "convert-attempt"
    with pytest.raises(StageFailed) as failed:
        backend.run_command("convert-hf-to-maxtext",
                            [sys.executable, "-c", FILL, str(stage_dir / "0" / "items")],
                            file_uri(stage_dir / "tpurl-logs" / "convert-hf-to-maxtext.log"))
    d = failed.value.diagnosis
    assert d.code == "storage/ENOSPC" and "ran out of disk space writing" in d.summary
    assert str(stage_dir) in d.summary and "GiB free now" in d.summary  # (write(): no path)
    assert "No space left on device" in d.detail and "removed 1 partial file(s)" in d.detail
    assert "the stage needs about 0.27 GiB" in d.summary and "local.root" in d.fix
    assert not (stage_dir / "0").exists()  # the partial files went, the logs stayed
    assert (stage_dir / "tpurl-logs" / "convert-hf-to-maxtext.log").is_file()
    stat = os.statvfs(small_fs)
    assert stat.f_bavail > stat.f_blocks // 2  # not left full
