"""The local backend: runs a Workload's argv as a subprocess of the rehearsal environment.

It plays the role the cluster plays on GKE: the venv stands in for the image, a directory for
the bucket. Output is streamed line by line into the Prefect log (redacted) and kept in full
beside the stage's output, so a failure is explained even after the run is gone.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path

from flows.config.profile import Profile
from flows.core.failures import StageFailed, diagnose_exit
from flows.core.layout import Layout
from flows.core.paths import REPO_ROOT
from flows.core.secrets import Redactor, resolve
from flows.core.stage import StageLogger, WorkloadRun
from flows.core.storage import LocalStorage
from flows.core.workload import Workload
from flows.stages.programs import HF_CHECK_IMAGE, REHEARSAL_IMAGE

ProgressCallback = Callable[[str, int, int | None], None]
TAIL_LINES = 60
# Environment the parent may carry that must not leak into the "image".
_DROP_ENV = re.compile(r"^(PREFECT_|TPURL_|VIRTUAL_ENV$|PYTHONPATH$|PYTHONHOME$)")


class LocalBackend:
    name = "local"

    def __init__(self, profile: Profile, layout: Layout, logger: StageLogger,
                 redactor: Redactor, on_progress: ProgressCallback | None = None,
                 stage: str = "", timeout_s: float | None = None) -> None:
        assert profile.local is not None
        self.profile, self.layout, self.logger = profile, layout, logger
        self.redactor, self.on_progress, self.stage = redactor, on_progress, stage
        self.timeout_s = timeout_s or profile.local.step_timeout_s
        self.storage = LocalStorage()

    def python_for(self, image: str) -> Path:
        venv = {REHEARSAL_IMAGE: self.layout.venv_dir(),
                HF_CHECK_IMAGE: self.layout.hf_check_venv_dir()}.get(image)
        if venv is None:
            raise ValueError(f"the local backend has no environment for image {image!r}")
        return venv / "bin" / "python"

    def run_workload(self, workload: Workload, log_uri: str) -> WorkloadRun:
        python = self.python_for(workload.image)
        argv = [str(python), *workload.argv[1:]] if workload.argv[0] == "python3" else list(workload.argv)
        env = dict(workload.env)
        for name, ref in workload.secret_env:
            value = resolve(ref)
            self.redactor.add(value)
            env[name] = value
        return self.run_command(workload.name, argv, log_uri, env, workload.progress_regex,
                                workload.total_steps)

    def run_command(self, name: str, argv: list[str], log_uri: str,
                    env: Mapping[str, str] | None = None, progress_regex: str | None = None,
                    total_steps: int | None = None) -> WorkloadRun:
        log_path = self.storage.local_path(log_uri)
        assert log_path is not None
        log_path.parent.mkdir(parents=True, exist_ok=True)
        full_env = {k: v for k, v in os.environ.items() if not _DROP_ENV.match(k)}
        full_env.update({"PYTHONUNBUFFERED": "1", **(env or {})})
        self.logger.info("%s: starting `%s`", name, self.redactor(" ".join(argv)))
        started = time.monotonic()
        pattern = re.compile(progress_regex) if progress_regex else None
        tail: deque[str] = deque(maxlen=TAIL_LINES)
        with open(log_path, "w") as log_file:
            proc = subprocess.Popen(argv, cwd=REPO_ROOT, env=full_env, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True, bufsize=1,
                                    start_new_session=True)
            timed_out = threading.Event()
            timer = threading.Timer(self.timeout_s, _kill_group, (proc, timed_out))
            timer.start()
            try:
                assert proc.stdout is not None
                for raw in proc.stdout:
                    line = self.redactor(raw.rstrip("\n"))
                    log_file.write(line + "\n")
                    tail.append(line)
                    self.logger.info("[%s] %s", name, line)
                    if pattern and self.on_progress and (m := pattern.search(line)):
                        self.on_progress(name, int(m.group("step")), total_steps)
                returncode = proc.wait()
            except BaseException:
                _kill_group(proc, None)  # cancellation or crash of the flow: leave no orphans
                raise
            finally:
                timer.cancel()
        wall = time.monotonic() - started
        if returncode != 0 or timed_out.is_set():
            diagnosis = diagnose_exit(name, returncode, list(tail), timed_out.is_set(),
                                      self.timeout_s)
            raise StageFailed(self.stage or name, diagnosis, log_uri)
        self.logger.info("%s: finished in %.1f s (log: %s)", name, wall, log_uri)
        return WorkloadRun(name=name, wall_s=wall, log_uri=log_uri)


def _kill_group(proc: subprocess.Popen[str], flag: threading.Event | None) -> None:
    if proc.poll() is not None:
        return
    if flag is not None:
        flag.set()
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
