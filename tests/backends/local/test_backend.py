"""The local backend with real subprocesses: logs kept, secrets redacted, failures diagnosed."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from flows.backends.local.backend import LocalBackend
from flows.backends.local.runtime import REHEARSAL_IMAGE
from flows.config import load_profile
from flows.config.profile import Profile, SecretRef
from flows.core.failures import FailureCategory, StageFailed
from flows.core.storage import file_uri
from flows.core.workload import Placement, Workload
from tests.support.other_user import other_user
from tests.support.profiles import fake_hf_token

CANARY = fake_hf_token("canaryLocal")


@pytest.fixture
def backend(tmp_path: Path):
    profile = load_profile("rehearsal", {"local.root": str(tmp_path / "root"),
                                         "local.venv": sys.prefix}, environ={})
    progress: list[tuple[str, int, int | None]] = []
    logger = logging.getLogger("tpurl-test")
    made = LocalBackend(profile, logger=logger, on_progress=lambda *a: progress.append(a),
                        stage="test", timeout_s=5)
    made.progress = progress  # type: ignore[attr-defined]
    return made


def _workload(code: str, **kw) -> Workload:
    return Workload(name="probe", image=REHEARSAL_IMAGE, argv=("python3", "-c", code),
                    placement=Placement("cpu"), **kw)


def test_output_is_logged_and_kept_with_secrets_redacted(backend, tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("CANARY_TOKEN", CANARY)
    workload = _workload("import os; print('WARNING: token is', os.environ['HF_TOKEN']); "
                         "[print(f'Config param k{i}: 1') for i in range(4)]; "
                         "print('TPURL_STEP 1'); print('TPURL_STEP 2')",
                         secret_env=(("HF_TOKEN", SecretRef(env="CANARY_TOKEN")),),
                         progress_regex=r"TPURL_STEP (?P<step>\d+)", total_steps=2)
    log_uri = file_uri(tmp_path / "logs" / "probe.log")
    with caplog.at_level(logging.INFO, logger="tpurl-test"):
        run = backend.run_workload(workload, log_uri)
    kept = (tmp_path / "logs" / "probe.log").read_text()
    assert "token is ***" in kept and CANARY not in kept
    assert CANARY not in caplog.text and "[probe] WARNING: token is ***" in caplog.text
    # the run's log shows warnings and steps; the rest is one line naming the kept log
    assert "[probe] Config param" not in caplog.text and "Config param k3: 1" in kept
    assert (f"probe: 4 of 7 output lines not shown here (4 configuration dump (`Config param "
            f"…`)); the full output is in {log_uri}") in caplog.messages
    assert backend.progress == [("probe", 1, 2), ("probe", 2, 2)]
    assert run.wall_s > 0 and run.log_uri == log_uri


def test_traceback_fails_fast_as_user_error_with_log_tail(backend, tmp_path):
    log = tmp_path / "fail.log"
    with pytest.raises(StageFailed) as caught:
        backend.run_workload(_workload("raise ValueError('bad learning rate')"), file_uri(log))
    diagnosis = caught.value.diagnosis
    assert diagnosis.category is FailureCategory.USER_ERROR
    assert "ValueError: bad learning rate" in diagnosis.summary
    assert "ValueError" in log.read_text()
    assert str(log) in str(caught.value)


def test_a_hung_program_is_stopped_and_called_stalled(backend, tmp_path):
    with pytest.raises(StageFailed) as caught:
        backend.run_workload(_workload("import time; print('step 1', flush=True); time.sleep(60)"),
                             file_uri(tmp_path / "hang.log"))
    assert caught.value.diagnosis.category is FailureCategory.STALLED


def test_a_missing_secret_is_reported_before_the_program_starts(backend, tmp_path, monkeypatch):
    from flows.core.secrets import SecretUnavailable

    monkeypatch.delenv("NO_SUCH_TOKEN", raising=False)
    workload = _workload("print('ran')", secret_env=(("HF_TOKEN", SecretRef(env="NO_SUCH_TOKEN")),))
    with pytest.raises(SecretUnavailable, match="NO_SUCH_TOKEN is not set"):
        backend.run_workload(workload, file_uri(tmp_path / "x.log"))
    assert not (tmp_path / "x.log").exists()


def test_secret_manager_reference_reads_the_latest_version(monkeypatch):
    """GCP Secret Manager through prefect-gcp's GcpSecret; Google's API stood in at that seam."""
    from prefect_gcp.secret_manager import GcpSecret

    from flows.core.secrets import SecretUnavailable, resolve

    calls = []

    def read_secret(self):
        calls.append((self.secret_name, self.secret_version, self.gcp_credentials.project))
        if self.secret_name == "missing":
            raise RuntimeError("404 Secret [projects/p/secrets/missing] not found")
        return CANARY.encode()

    import google.auth
    from google.auth.credentials import AnonymousCredentials

    monkeypatch.setattr(google.auth, "default",
                        lambda *a, **k: (AnonymousCredentials(), "my-proj-123"))
    monkeypatch.setattr(GcpSecret, "read_secret", read_secret)
    assert resolve(SecretRef(gcp_secret="hf-token"), project="my-proj-123") == CANARY
    assert calls == [("hf-token", "latest", "my-proj-123")]
    with pytest.raises(SecretUnavailable, match="could not be read") as caught:
        resolve(SecretRef(gcp_secret="missing"), project="my-proj-123")
    assert "gcloud secrets create" in str(caught.value)


def test_a_live_orphan_of_the_same_output_is_stopped_before_the_rerun(backend, tmp_path, caplog):
    """What a SIGKILLed run without PR_SET_PDEATHSIG (another machine's kernel, a container
    runtime) would leave: the program still running, its tag beside the log."""
    from flows.core.processes import MARK_ENV, ProcessTag, new_mark

    log = tmp_path / "out" / "tpurl-logs" / "probe.log"
    log.parent.mkdir(parents=True)
    mark = new_mark()  # as run_command starts its programs: marked, in a session of their own
    orphan = subprocess.Popen(["sleep", "600"], start_new_session=True,
                              env={**os.environ, MARK_ENV: mark})
    log.with_suffix(".pid").write_text(ProcessTag.of(orphan.pid, "probe", mark).to_json())
    caplog.set_level(logging.INFO)
    run = backend.run_workload(_workload("print('ran')"), file_uri(log))
    orphan.wait(timeout=15)  # stopped (stop_group reaps it, so its status reads 0 here)
    assert "still running from a run that died" in caplog.text
    assert run.name == "probe" and not log.with_suffix(".pid").exists()


def test_a_recycled_pid_is_not_taken_for_an_orphan(backend, tmp_path, caplog):
    """A tag whose pid now belongs to another process (started at another time than the tag
    records, as after a reboot or pid wrap): that process is left alone, even though it is
    marked and leads a session as the tag's program would, and the program runs."""
    from dataclasses import replace

    from flows.core.processes import MARK_ENV, ProcessTag, new_mark

    log = tmp_path / "out" / "tpurl-logs" / "probe.log"
    log.parent.mkdir(parents=True)
    mark = new_mark()
    other = subprocess.Popen(["sleep", "600"], start_new_session=True,
                             env={**os.environ, MARK_ENV: mark})
    try:
        real = ProcessTag.of(other.pid, "probe", mark)
        recycled = replace(real, ticks=(real.ticks or 0) + 1)  # all else is the process's
        log.with_suffix(".pid").write_text(recycled.to_json())
        caplog.set_level(logging.INFO)
        run = backend.run_workload(_workload("print('ran')"), file_uri(log))
        assert other.poll() is None, "a process the tag does not describe was signalled"
        assert "still running from a run that died" not in caplog.text
        assert run.name == "probe" and "ran" in log.read_text()
        assert not log.with_suffix(".pid").exists()  # the stale tag is gone with the run
    finally:
        other.kill()
        other.wait(timeout=15)


def _own_venv_backend(tmp_path: Path) -> tuple[Path, Profile, LocalBackend]:
    """A train-stage backend whose rehearsal venv is a directory of the test's own."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    profile = load_profile("rehearsal", {"local.root": str(tmp_path / "root"),
                                         "local.venv": str(venv),
                                         "local.hf_check_venv": str(venv)}, environ={})
    return venv, profile, LocalBackend(profile, logger=logging.getLogger("tpurl-test"),
                                       stage="train")


@pytest.mark.parametrize("carried", [None, [], ["some-other-patch"]])
def test_a_venv_another_run_re_patched_refuses_the_program_before_it_starts(tmp_path, carried):
    """Two local profiles naming one venv with different image.disabled_patches: the second's
    image stage re-patches it under the first, whose next program must not run with a
    patch set its image stage never applied (None: the other run is applying now)."""
    import json

    from flows.backends.local.image import PATCH_SET_FILE

    venv, _profile, made = _own_venv_backend(tmp_path)
    (venv / PATCH_SET_FILE).write_text(json.dumps({"patches": carried}))
    marker = tmp_path / "ran"
    with pytest.raises(StageFailed) as failed:
        made.run_workload(_workload(f"open({str(marker)!r}, 'w')"), file_uri(tmp_path / "x.log"))
    assert failed.value.diagnosis.code == "image/venv-repatched"
    assert failed.value.diagnosis.category is FailureCategory.USER_ERROR
    assert "local.venv" in failed.value.diagnosis.fix
    assert not marker.exists()


def test_a_venv_carrying_this_runs_patch_set_runs_the_program(tmp_path):
    import json

    from flows.backends.local.image import PATCH_SET_FILE, enabled_patch_ids

    venv, profile, made = _own_venv_backend(tmp_path)
    (venv / PATCH_SET_FILE).write_text(json.dumps({"patches": enabled_patch_ids(profile)}))
    marker = tmp_path / "ran"
    made.run_workload(_workload(f"open({str(marker)!r}, 'w')"), file_uri(tmp_path / "x.log"))
    assert marker.exists()


@pytest.mark.parametrize("carried, done", [(None, False), ([], False),
                                           (["some-other-patch"], False), ("own", True),
                                           ("no file", True)])
def test_the_image_stage_is_not_done_while_the_venv_carries_another_patch_set(
        tmp_path, carried, done):
    """The lineage record is one per venv: after another profile's image stage (or one that
    stopped while re-patching), this profile's record still matches over files it never
    patched, so the stage must run again and patch them back. A venv without the file (older
    than it) is judged done, as before."""
    import json

    from flows.backends.local.image import PATCH_SET_FILE, LocalImage, enabled_patch_ids
    from flows.core.layout import Layout
    from flows.core.stage import StageContext
    from flows.core.storage import LocalStorage

    venv, profile, made = _own_venv_backend(tmp_path)
    if carried != "no file":
        ids = enabled_patch_ids(profile) if carried == "own" else carried
        (venv / PATCH_SET_FILE).write_text(json.dumps({"patches": ids}))
    ctx = StageContext(profile=profile, layout=Layout(profile), backend=made,
                       storage=LocalStorage(), logger=logging.getLogger("tpurl-test"))
    assert LocalImage(made).present(ctx, None) is done  # type: ignore[arg-type]


@pytest.fixture
def bystanders() -> Iterator[tuple[subprocess.Popen[str], subprocess.Popen[str]]]:
    """Two processes tpurl did not start, each leading a group of its own: another local
    user's, and one of this user's (a shell, a daemon) started without tpurl's mark."""
    other = other_user()
    theirs = other.popen(["sleep", "600"])
    mine = subprocess.Popen(["sleep", "600"], start_new_session=True, text=True)
    try:
        yield theirs, mine
    finally:
        for process in (theirs, mine):
            process.kill()
            process.wait()


@pytest.mark.parametrize("tag_owner", ["us", "another user"])
def test_a_planted_pid_tag_never_makes_tpurl_signal_a_process_it_did_not_start(
        backend, tmp_path, caplog, bystanders, tag_owner):
    """Tags written as an attacker can: the right start time (/proc/PID/stat is readable by
    everyone), host and uid, even a guessed mark; the file ours (planted through a path we
    write) or another user's. Neither process is signalled, and the run goes on."""
    from flows.core.processes import ProcessTag, process_uid

    other = other_user()
    out = tmp_path / "out" / "tpurl-logs"
    out.mkdir(parents=True)
    for index, victim in enumerate(bystanders):
        log = out / f"probe{index}.log"
        tag = ProcessTag.of(victim.pid, "probe", mark="0" * 32)
        assert tag.uid == process_uid(victim.pid) and tag.alive()
        log.with_suffix(".pid").write_text(tag.to_json())
        if tag_owner == "another user":
            other.own(log.with_suffix(".pid"))
        caplog.set_level(logging.INFO)
        run = backend.run_workload(_workload("print('ran')"), file_uri(log))
        assert run.name == "probe"
        assert victim.poll() is None, f"{victim.args} was signalled"
        assert "which tpurl did not start" in caplog.text
