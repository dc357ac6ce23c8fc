"""The local backend: runs a Workload's argv as a subprocess of the rehearsal environment.

It plays the role the cluster plays on GKE: the venv stands in for the image (image.py), a
directory for the bucket, scripts for the hub (infra.py), a launcher for vLLM (runtime.py).
Output is streamed line by line into the Prefect log (redacted) and kept in full beside the
stage's output, so a failure is explained even after the run is gone.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import logging
import os
import re
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from pathlib import Path

from flows.backends.local.image import LocalImage, venv_patch_mismatch
from flows.backends.local.infra import LocalInfra
from flows.backends.local.program_group import Outcome, Program, Started, run_together
from flows.backends.local.runtime import HF_CHECK_IMAGE, REHEARSAL_IMAGE, LocalRuntime
from flows.common.failure_codes import Failure
from flows.common.issues import Issue
from flows.common.ownership import is_inside
from flows.common.paths import REPO_ROOT
from flows.config.profile import Profile
from flows.core.backend import ProgressCallback, StageLogger, WorkloadRun
from flows.core.budgets import local_stage_timeout_s
from flows.core.failures import Diagnosis, StageFailed, diagnose_exit, user_error
from flows.core.layout import Layout
from flows.core.manifest import LOGS_DIR
from flows.core.processes import (
    MARK_ENV,
    ProcessTag,
    die_with_parent,
    file_owner_problem,
    new_mark,
    stop_group,
)
from flows.core.program_log import ProgramLines
from flows.core.safe_writes import LineLog, write_text
from flows.core.secrets import Redactor, resolve
from flows.core.storage import LocalStorage, file_uri, join
from flows.core.workload import Workload

TAIL_LINES = 60
# Environment the parent may carry that must not leak into the "image".
_DROP_ENV = re.compile(r"^(PREFECT_|TPURL_|VIRTUAL_ENV$|PYTHONPATH$|PYTHONHOME$)")


class LocalBackend:
    """The Backend protocol (flows/core/backend.py) on this machine; no TPU is ever billed."""

    name = "local"
    usd_per_chip_hour = 0.0

    def __init__(self, profile: Profile, *, logger: StageLogger | None = None,
                 redactor: Redactor | None = None, on_progress: ProgressCallback | None = None,
                 stage: str = "", timeout_s: float | None = None) -> None:
        assert profile.local is not None
        self.profile, self.layout = profile, Layout(profile)
        self.logger: StageLogger = logger or logging.getLogger("tpurl")
        self.redactor = redactor or Redactor()
        self.on_progress, self.stage = on_progress, stage
        self.timeout_s = timeout_s or profile.local.step_timeout_s
        self.storage = LocalStorage()
        self.image = LocalImage(self)
        self.infra = LocalInfra(self)
        self.runtime = LocalRuntime(profile, self.layout)

    def for_stage(self, stage: str, *, logger: StageLogger, redactor: Redactor,
                  on_progress: ProgressCallback | None) -> LocalBackend:
        """This run's backend bound to one stage and its task's logger."""
        bound = copy.copy(self)
        bound.logger, bound.redactor, bound.on_progress, bound.stage = (
            logger, redactor, on_progress, stage)
        bound.image, bound.infra = LocalImage(bound), LocalInfra(bound)
        return bound

    def clear_leftovers(self, stage: str, directory: str) -> int:
        """Empty a stage's half-written output, which must lie inside the output root with
        symlinks followed: a link placed there pointing at another directory would have
        that directory's files removed."""
        path, root_path = self.storage.local_path(directory), self.storage.local_path(self.layout.root)
        assert path is not None and root_path is not None
        if not is_inside(path, root_path):
            raise user_error(stage, "a leftover directory resolves outside the output root",
                             f"{path} resolves to {os.path.realpath(path)}, not under "
                             f"{os.path.realpath(root_path)}; nothing was removed",
                             f"remove the symbolic link {path} (or what leads to it) yourself",
                             code=Failure.STORAGE_OUTSIDE_ROOT)
        root = self.storage.local_path(join(directory, LOGS_DIR))
        for tag in sorted(root.glob("*.pid")) if root is not None and root.is_dir() else []:
            self._stop_orphan(tag)
        return self.storage.remove_tree(directory, keep=(LOGS_DIR,))

    def _stop_orphan(self, tag_path: Path) -> None:
        """A program a dead run left running still writes into this output: stop it first.
        Its files are never taken as output (only a verified run writes a lineage record)."""
        if not tag_path.is_file():
            return
        tag = ProcessTag.from_json(tag_path.read_text())
        if tag is not None and tag.alive():
            if why := file_owner_problem(tag_path) or tag.not_ours():
                # a tag planted (or stale) must never make tpurl signal another process
                self.logger.warning("%s names pid %d, which tpurl did not start (%s): not "
                                    "signalled; if it is a program of an earlier run still "
                                    "writing here, stop it yourself (kill -TERM -%d)",
                                    tag_path, tag.pid, why, tag.pid)
            else:
                self.logger.warning("%s is still running from a run that died (pid %d, started "
                                    "%s); stopping it before running again", tag.what, tag.pid,
                                    time.strftime("%Y-%m-%d %H:%M:%S",
                                                  time.localtime(tag.started_at)))
                stop_group(tag.pid)
        tag_path.unlink(missing_ok=True)

    def stage_timeout_s(self, stage: str) -> float:
        return local_stage_timeout_s(self.profile)

    def estimated_chip_hours(self, stage: str) -> float:
        return 0.0

    def held_chip_hours(self, stage: str, wall_s: float) -> float:
        return 0.0

    def plan_header(self) -> list[str]:
        return []

    def plan_footer(self) -> list[str]:
        return []

    def write_plan_files(self, out_dir: Path, workloads: Mapping[str, Workload]) -> list[Path]:
        return []

    def preflight(self) -> tuple[str, bool]:
        return "pre-flight: nothing to check for a local profile", True

    def validation_warnings(self) -> list[str]:
        return []

    def start_issues(self) -> list[Issue]:
        return []  # the rehearsal installs what it runs

    def python_for(self, image: str) -> Path:
        venv = {REHEARSAL_IMAGE: self.layout.venv_dir(),
                HF_CHECK_IMAGE: self.layout.hf_check_venv_dir()}.get(image)
        if venv is None:
            raise ValueError(f"the local backend has no environment for image {image!r}")
        return venv / "bin" / "python"

    def run_workloads(self, runs: Sequence[tuple[Workload, str]]) -> list[Outcome]:
        """Independent programs of a stage at once (flows/backends/local/program_group.py)."""
        return self.run_together([functools.partial(self.run_workload, workload, log_uri)
                                  for workload, log_uri in runs])

    def run_together[Result](self, programs: Sequence[Program[Result]]
                             ) -> list[Result | BaseException]:
        """``programs`` (each given the callback its run_command calls with its process) at
        once, stopped as one when the caller is interrupted."""
        return run_together(programs, lambda proc: _kill_group(proc, None))

    def run_workload(self, workload: Workload, log_uri: str,
                     on_start: Started | None = None) -> WorkloadRun:
        python = self.python_for(workload.image)
        if workload.image == REHEARSAL_IMAGE and (
                why := venv_patch_mismatch(self.profile, self.layout.venv_dir())):
            raise user_error(
                self.stage or workload.name, "the rehearsal venv was re-patched by another run",
                f"{why}: {workload.name} would run with patches its image stage did not apply",
                "give each local profile with its own image.disabled_patches a venv of its own "
                "(local.venv), or run them one after the other; a rerun's image stage patches "
                "the venv back",
                code=Failure.IMAGE_VENV_REPATCHED)
        argv = [str(python), *workload.argv[1:]] if workload.argv[0] == "python3" else list(workload.argv)
        env = dict(workload.env)
        for name, ref in workload.secret_env:
            value = resolve(ref)
            self.redactor.add(value)
            env[name] = value
        return self.run_command(workload.name, argv, log_uri, env, workload.progress_regex,
                                workload.total_steps, on_start)

    def run_command(self, name: str, argv: list[str], log_uri: str,
                    env: Mapping[str, str] | None = None, progress_regex: str | None = None,
                    total_steps: int | None = None, on_start: Started | None = None) -> WorkloadRun:
        log_path = self.storage.local_path(log_uri)
        assert log_path is not None
        tag_path = log_path.with_suffix(".pid")
        self._stop_orphan(tag_path)
        if log_path.exists():  # the log of an earlier attempt explains its failure: keep it
            log_path.replace(log_path.with_suffix(".previous.log"))
        full_env = {k: v for k, v in os.environ.items() if not _DROP_ENV.match(k)}
        mark = new_mark()  # what proves to a later run that the tagged process is this one
        full_env.update({"PYTHONUNBUFFERED": "1", **(env or {}), MARK_ENV: mark})
        self.logger.info("%s: starting `%s`", name, self.redactor(" ".join(argv)))
        started = time.monotonic()
        pattern = re.compile(progress_regex) if progress_regex else None
        tail: deque[str] = deque(maxlen=TAIL_LINES)
        log_file = LineLog(log_path, f"{name}'s log")
        shown = ProgramLines(name, progress_regex)  # the rest stays in log_file only
        timed_out = threading.Event()
        timer: threading.Timer | None = None
        proc: subprocess.Popen[str] | None = None
        try:
            # From its start an interruption (Ctrl-C lands on any line) stops the program and
            # removes its tag; the timer is a daemon, so one that an interrupted start left
            # running can never hold the interpreter's exit (a `tpurl run` that did not
            # exit after Ctrl-C), and it is cancelled on every way out. (A Ctrl-C inside
            # Popen's own code, after the fork, leaves a program we have no handle on: its
            # parent-death signal stops it when this process ends.)
            try:
                # its own process group (stopped as a whole), SIGTERM if this process dies
                proc = subprocess.Popen(argv, cwd=REPO_ROOT, env=full_env,
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        text=True, bufsize=1, start_new_session=True,
                                        preexec_fn=die_with_parent)
                if on_start is not None:  # a group running programs together can stop it
                    on_start(proc)
                write_text(tag_path, ProcessTag.of(proc.pid, name, mark).to_json(),
                           f"{name}'s pid tag")
                tag_path.chmod(0o600)  # the mark is the proof: for this user's eyes only
                timer = threading.Timer(self.timeout_s, _kill_group, (proc, timed_out))
                timer.daemon = True
                timer.start()
                assert proc.stdout is not None
                for raw in proc.stdout:
                    line = self.redactor(raw.rstrip("\n"))
                    log_file.write(line)
                    tail.append(line)
                    if shown.keep(line):
                        self.logger.info("[%s] %s", name, line)
                    if pattern and self.on_progress and (m := pattern.search(line)):
                        self.on_progress(name, int(m.group("step")), total_steps)
                returncode = proc.wait()
            except BaseException:
                if proc is not None:  # cancellation or crash of the flow: leave no orphans
                    _kill_group(proc, None)
                raise
            finally:
                if timer is not None:
                    timer.cancel()
                tag_path.unlink(missing_ok=True)
        finally:
            log_file.close()
            for text in shown.ending(log_uri):
                self.logger.info("%s", text)
        wall = time.monotonic() - started
        if returncode != 0 or timed_out.is_set():
            diagnosis = self._no_space(name, list(tail), log_path, log_file.full) or \
                diagnose_exit(name, returncode, list(tail), timed_out.is_set(), self.timeout_s)
            raise StageFailed(self.stage or name, diagnosis, log_uri)
        if log_file.full is not None:  # the program finished; its log could not be kept
            raise log_file.full
        self.logger.info("%s: finished in %.1f s (log: %s)", name, wall, log_uri)
        return WorkloadRun(name=name, wall_s=wall, log_uri=log_uri)


    def _no_space(self, name: str, tail: list[str], log_path: Path,
                  log_full: OSError | None) -> Diagnosis | None:
        """A full disk (the program's own ENOSPC, or ours writing its log): the attempt's
        partial files go (they could never be output and they keep the disk full), except
        completed training checkpoints, which are resume points (orbax's temporaries go)."""
        from flows.core.root_space import no_space_diagnosis, stage_estimates
        from flows.core.safe_writes import free_bytes
        from flows.core.verify import remove_orbax_temporaries

        if log_full is not None:
            tail = [*tail, f"{log_path}: {log_full.strerror} (the log stops here)"]
        elif not any("No space left on device" in line or "Errno 28" in line for line in tail):
            return None
        stage_dir = log_path.parent.parent  # <stage output>/tpurl-logs/<workload>.log
        removed, kept = 0, "its logs are kept"
        if self.stage in ("convert", "export"):
            removed = self.storage.remove_tree(stage_dir.as_uri(), keep=(LOGS_DIR,))
        elif self.stage == "train":
            removed = remove_orbax_temporaries(self.storage, file_uri(stage_dir))
            kept = "its logs and completed checkpoints, the resume points, are kept"
        needed = stage_estimates(self.profile).get(self.stage or "")
        return no_space_diagnosis(name, tail, stage_dir, free_bytes(stage_dir), needed, removed,
                                  kept)


def _kill_group(proc: subprocess.Popen[str], flag: threading.Event | None) -> None:
    """Stop a program's process group: its leader gets SIGTERM and 10 s to end, then what is
    left of the group gets SIGKILL. Why the second signal even when the leader ended: a
    child the program forked as the SIGTERM came (the kernel restarts that fork after the
    signal, so the child never got it) or one that ignores SIGTERM keeps the program's
    output open, and the thread reading it would wait for it (seen: a `sleep 60` left by a
    shell stopped in the middle of starting it)."""
    if proc.poll() is None:
        if flag is not None:
            flag.set()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)
    with contextlib.suppress(ProcessLookupError):  # none left: the group is gone
        os.killpg(proc.pid, signal.SIGKILL)
