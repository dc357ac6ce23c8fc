"""`tpurl validate`, `plan` and `run` refuse an output root that is read-only or too small
for the stages that will run, before anything starts: real `tpurl` processes, a real small
tmpfs."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from flows.common.paths import REPO_ROOT
from tests.support.tmpfs import mounted_tmpfs

TPURL = str(Path(sys.executable).with_name("tpurl"))


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    with mounted_tmpfs(tmp_path / "small", "size=64m") as mount:
        yield mount


def _tpurl(*args: str, cache: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    if cache is not None:
        env["TPURL_CACHE_DIR"] = str(cache)
    return subprocess.run([TPURL, *args], cwd=REPO_ROOT, env=env, capture_output=True,
                          text=True, timeout=300, check=False)


@pytest.mark.parametrize("command", ["validate", "plan", "run"])
def test_a_root_without_the_space_is_refused_with_the_estimate(small_fs: Path, command: str,
                                                               tmp_path: Path):
    done = _tpurl(command, "rehearsal", "--set", f"local.root={small_fs}/out",
                  cache=tmp_path / "cache")
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"local.root: {small_fs} has 0.06 GiB free" in done.stderr
    for stage in ("infra", "convert", "train", "export"):
        assert f"{stage} 0." in done.stderr  # each stage's estimate is stated
    # before anything: no API server was started (tpurl's own logs its output in the cache)
    assert not list((tmp_path / "cache" / "logs").glob("api-server-*.log"))
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


def _fill(mount: Path) -> Path:
    """Real writes until the real tmpfs refuses (ENOSPC)."""
    filler = mount / "filler.bin"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"x" * (1 << 20))
    except OSError as exc:
        assert exc.errno == errno.ENOSPC
    finally:
        os.close(fd)
    return filler


def test_our_own_write_on_a_full_disk_is_the_storage_error_with_what_and_where(small_fs: Path):
    """A lineage record written by the pipeline itself (not a program) on a full disk: the
    storage error names the file, what it is, the free and needed space and the fix, and
    no partial file of ours is left."""
    from flows.config import load_profile
    from flows.core.root_space import storage_failure
    from flows.core.safe_writes import DiskFull
    from flows.core.storage import LocalStorage, file_uri

    profile = load_profile("rehearsal", {"local.root": str(small_fs / "out")}, environ={})
    record = small_fs / "out" / "convert-k" / "tpurl-lineage.json"
    record.parent.mkdir(parents=True)
    _fill(small_fs)
    with pytest.raises(DiskFull) as full:
        LocalStorage().write_text(file_uri(record), "{}" * 100_000)
    failure = storage_failure("convert", full.value, "/cache/errors/run-convert.log", profile)
    assert failure is not None
    d = failure.diagnosis
    assert d.code == "storage/ENOSPC" and d.category.value == "user-error"
    assert d.summary.startswith(f"cannot write {record} (the stage's lineage record): No "
                                "space left on device (ENOSPC); 0.0 KiB free")
    assert "about 0.27 GiB needed" in d.summary  # the convert stage's estimate
    assert "free space" in d.fix and "local.root" in d.fix
    assert "/cache/errors/run-convert.log" in d.detail and "Traceback" not in d.detail
    assert sorted(p.name for p in record.parent.iterdir()) == []  # no .tmp left behind


def test_a_full_disk_met_by_a_write_we_did_not_route_is_placed_at_the_root(small_fs: Path):
    """ENOSPC raised by a buffered write carries no file name: it is still the storage
    error, at the output root, never an internal error."""
    from flows.config import load_profile
    from flows.core.root_space import storage_failure

    profile = load_profile("rehearsal", {"local.root": str(small_fs / "out")}, environ={})
    (small_fs / "out").mkdir()
    _fill(small_fs)
    with pytest.raises(OSError) as raised, open(small_fs / "out" / "x", "w") as handle:
        handle.write("y" * (1 << 20))
    assert raised.value.filename is None
    failure = storage_failure("infra", raised.value, None, profile)
    assert failure is not None and failure.diagnosis.code == "storage/ENOSPC"
    assert f"cannot write {small_fs / 'out'}" in failure.diagnosis.summary


FILL_THEN_TALK = """
import os, sys
try:
    with open(os.path.join(sys.argv[1], "shard.bin"), "wb") as out:
        while True:
            out.write(b"x" * (1 << 20))
except OSError:
    pass
for i in range(20000):
    print("a line of the program's output that its log must hold", i)
sys.exit(int(sys.argv[2]))
"""


@pytest.mark.parametrize("exit_code", [0, 1])
def test_a_log_that_cannot_be_written_stops_neither_the_program_nor_names_the_wrong_cause(
        small_fs: Path, exit_code: int):
    """The program fills the disk and then prints: our own log writes meet ENOSPC. The
    program runs to its end; a success is the storage error for the log, a failure the
    no-space diagnosis of the stage (partial files removed), never a traceback."""
    from flows.backends.local.backend import LocalBackend
    from flows.config import load_profile
    from flows.core.failures import StageFailed
    from flows.core.safe_writes import DiskFull
    from flows.core.storage import file_uri

    profile = load_profile("rehearsal", {"local.root": str(small_fs / "out")}, environ={})
    stage_dir = small_fs / "out" / "export-attempt"
    (stage_dir / "part").mkdir(parents=True)
    log = stage_dir / "tpurl-logs" / "to-huggingface.log"
    backend = LocalBackend(profile, stage="export")
    expected = DiskFull if exit_code == 0 else StageFailed
    with pytest.raises(expected) as failed:
        backend.run_command("to-huggingface", [sys.executable, "-c", FILL_THEN_TALK,
                                               str(stage_dir / "part"), str(exit_code)],
                            file_uri(log))
    if exit_code == 0:
        assert failed.value.filename == str(log) and "log" in failed.value.what
    else:
        d = failed.value.diagnosis
        assert d.code == "storage/ENOSPC" and "(the log stops here)" in d.detail
        assert not (stage_dir / "part").exists()  # the attempt's partial files went
    assert log.is_file()


ORBAX_LIKE = """
# Saves like orbax-checkpoint 0.12 (orbax/checkpoint/_src/path/atomicity.py): each step is
# written into <step>.orbax-checkpoint-tmp and renamed to <step> once complete.
import os, sys
actor = sys.argv[1]
for step in (1, 2):
    tmp = os.path.join(actor, f"{step}.orbax-checkpoint-tmp")
    os.makedirs(os.path.join(tmp, "model_params"))
    with open(os.path.join(tmp, "model_params", "shard.bin"), "wb") as out:
        out.write(b"w" * (8 << 20) if step == 1 else b"")
        while step == 2:
            out.write(b"w" * (1 << 20))
            out.flush()
    os.rename(tmp, os.path.join(actor, str(step)))
"""


def test_a_train_that_fills_the_disk_mid_checkpoint_keeps_only_completed_checkpoints(
        small_fs: Path):
    """ENOSPC while the second checkpoint is written: its orbax temporary goes (the disk
    has room again), the completed first checkpoint stays as the resume point."""
    from flows.backends.local.backend import LocalBackend
    from flows.config import load_profile
    from flows.core.failures import StageFailed
    from flows.core.storage import file_uri

    profile = load_profile("rehearsal", {"local.root": str(small_fs / "out")}, environ={})
    run_dir = small_fs / "out" / "train-run"
    actor = run_dir / "checkpoints" / "actor"
    backend = LocalBackend(profile, stage="train")
    with pytest.raises(StageFailed) as failed:
        backend.run_command("train-rl", [sys.executable, "-c", ORBAX_LIKE, str(actor)],
                            file_uri(run_dir / "tpurl-logs" / "train-rl.log"))
    d = failed.value.diagnosis
    assert d.code == "storage/ENOSPC" and "completed checkpoints" in d.detail
    assert "removed 1 partial file(s)" in d.detail
    assert sorted(p.name for p in actor.iterdir()) == ["1"]
    assert (actor / "1" / "model_params" / "shard.bin").stat().st_size == 8 << 20
    stat = os.statvfs(small_fs)
    assert stat.f_bavail > stat.f_blocks // 2  # not left full


def test_the_commands_log_on_a_full_disk_stops_with_one_line(small_fs: Path, monkeypatch,
                                                             capsys):
    """The command's own log file (under the cache directory) on a full disk: one warning,
    not logging's traceback per record."""
    import logging

    from flows.console.output import command_log

    monkeypatch.setenv("TPURL_CACHE_DIR", str(small_fs / "cache"))
    (small_fs / "cache" / "logs").mkdir(parents=True)
    _fill(small_fs)
    with command_log("run", "rehearsal", private_api=True) as log:
        for number in range(200):
            logging.getLogger("tpurl.test").warning("record %d %s", number, "x" * 400)
    err = capsys.readouterr().err
    assert log is not None and err.count(f"the log file {log} stops here") == 1
    assert "Logging error" not in err and "Traceback" not in err
