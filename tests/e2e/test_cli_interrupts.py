"""`tpurl run rehearsal-qwen3` stopped as a user stops it, in every stage, then resumed: the
real console script (.venv/bin/tpurl) in a session of its own, the real programs on CPU.

The profile is the rehearsal's Qwen3 dense one (deployments/profiles/rehearsal-qwen3.yaml:
rehearsal.yaml's stages, the evaluation included, with a tiny model of qwen3-0.6b's
structure): how the CLI stops and resumes a run does not depend on the model, and the tiny
Qwen3-MoE's programs (48 layers of 128 experts) cost more. Measured on the shared 2-core
machine, programs compiled: the whole test 269 CPU-s with the Qwen3-MoE `rehearsal`, 209
with `rehearsal-qwen3`. Its last run completes the profile, so the Qwen3 dense family's
checks (tests/e2e/test_rehearsal_families.py ``assert_family_outputs``: the tiny model's
structure, the second step's checkpoint, the export loaded as ``Qwen3ForCausalLM`` with
trained weights) read its root at the end: no other test runs this profile, and this one
compiles its programs itself.

One pass over the rehearsal: in each stage (image, infra, convert, train, export, evaluate)
the run is stopped once by Ctrl-C (SIGINT to its process group, as a terminal sends it) and
once by SIGTERM (to the CLI alone, as `kill` or a supervisor sends it), and in the image
stage also once by SIGKILL (as the OOM killer ends it: no cleanup of ours runs; the
programs and the API server die by their parent-death signal, and the rerun frees the dead
holder's lock at once); each rerun skips the stages that finished and is stopped in the
next one, and the last rerun completes. A stage is reached by reading the CLI's own output:
the signal goes once a program of that stage is running (the Prefect task's "<program>:
starting" line, and the program's process seen).

The image stage's runs each start an API server of their own (TPURL_KEEP_API_S=0: the
server dies with the CLI, by its parent-death signal after a SIGKILL); from the infra stage
on the runs share the kept server, as a user's commands do once they ask for one
(TPURL_KEEP_API_S set; flows/console/kept_api.py), which is also SIGKILLed once more in the
train stage: its lease of the dead holder lives on in the kept server and the rerun frees it
at once. The kept server is stopped by `tpurl api-server stop` at the end.

After each stop: exit 130 or 143, the one message ("interrupted (SIGINT) during stage X …
To resume: <the same command>"), nothing left running but the kept server (every process
that descended from the CLI when it was signalled, the sessions of the CLI, its own API
server and its program, and anything started from this test's venvs), and the profile's
lock released (its slot is 0 in the API's database, and the rerun takes it without freeing
a dead holder).

The venvs are this test's own (under tmp_path), so the image stage has work in every session
until it finishes, whatever the repository's .venvs hold: its three stops end the venvs'
creation as it starts, and its uv installs (from the warm cache) run once, in the run that
is then stopped in infra. The
programs' JAX compilation cache beside them is the repository's (a link), as a user's next
rehearsal finds the one its earlier runs kept: compiling is not what this test is about,
and the CI's e2e lanes, which share the CPU, need not compile the same programs twice. For
the same reason the venvs' Python bytecode starts as the repository's venvs' (hard links,
under this test's venv paths: Python's bytecode prefix is keyed by the source's path, and
uv links both venvs' files to one cache, so each file's mtime and size, which Python checks
before it uses a .pyc, are the same; a file that differs is compiled again as usual).
Without it every program's first start compiled MaxText, TensorFlow, JAX and torch from
source here again.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from flows.backends.local.runtime import BYTECODE_DIR, JAX_CACHE_DIR
from flows.common.paths import REHEARSAL_DIR, REPO_ROOT
from flows.config import load_profile
from flows.core.layout import Layout
from flows.locking.profile_lock import lock_name
from tests.e2e.test_rehearsal_families import assert_family_outputs
from tests.support.prefect_database import seed_home

pytestmark = pytest.mark.rehearsal

TPURL = Path(sys.executable).with_name("tpurl")  # the console script a user runs
STAGES = ("image", "infra", "convert", "train", "export", "evaluate")
# Ctrl-C and SIGTERM in every stage; SIGKILL (what the OOM killer does: no cleanup runs)
# once with the command's own API server, once with the kept one
KILLED_IN = {"image", "train"}
PLAN = [(stage, signum) for stage in STAGES for signum in (
    (signal.SIGINT, signal.SIGTERM, signal.SIGKILL) if stage in KILLED_IN else
    (signal.SIGINT, signal.SIGTERM))]
OWN_SERVER_STAGES = {"image"}  # TPURL_KEEP_API_S=0 there; the kept server after
KEEP_API_S = "900"  # asked for: the kept server outlives every stop of the test
ABORTED = {signal.SIGINT: "Execution was aborted by an interrupt signal",
           signal.SIGTERM: "Execution was aborted by a termination signal"}
STAGE_WITHIN_S = 3600.0  # to reach a stage: the stages before it run on CPU first (minutes)
PROFILE = "rehearsal-qwen3"  # the Qwen3 dense rehearsal: the module's docstring says why
# what Prefect logs when a client finds no API and starts one (prefect/server/api/server.py
# SubprocessASGIServer.start, prefect 3.9.1)
TEMPORARY_SERVER = "Starting temporary server"


def _stat(pid: int) -> tuple[int, int, str] | None:
    """(parent pid, session id, state) from /proc/PID/stat, None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[-1].split()
    except OSError:
        return None
    return int(fields[1]), int(fields[3]), fields[0]


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _processes() -> dict[int, tuple[int, int, str]]:
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (stat := _stat(int(entry))) is not None:
            found[int(entry)] = stat
    return found


def _live(table: dict[int, tuple[int, int, str]]) -> dict[int, tuple[int, int, str]]:
    return {pid: stat for pid, stat in table.items() if stat[2] != "Z"}  # a zombie is dead


def _descendants(root: int) -> set[int]:
    table = _processes()
    found, frontier = set(), {root}
    while frontier:
        frontier = {pid for pid, (ppid, _, _) in table.items() if ppid in frontier} - found
        found |= frontier
    return found


class Cli:
    """One `tpurl run`, its output read as it comes."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        # a session of its own (it is the terminal's foreground group here), with SIGINT
        # ignored on entry as a background shell would leave it: the CLI must not care
        self.proc = subprocess.Popen(argv, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True,
                                     start_new_session=True,
                                     preexec_fn=lambda: signal.signal(signal.SIGINT,
                                                                      signal.SIG_IGN))
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._changed:
                self.lines.append(line)
                self._changed.notify_all()
        with self._changed:
            self.lines.append("")  # EOF
            self._changed.notify_all()

    def wait_for(self, pattern: str, within_s: float) -> re.Match[str]:
        compiled, seen = re.compile(pattern), 0
        deadline = time.monotonic() + within_s
        with self._changed:
            while True:
                for line in self.lines[seen:]:
                    if match := compiled.search(line):
                        return match
                seen = len(self.lines)
                if self.lines and self.lines[-1] == "":
                    raise AssertionError(f"tpurl ended (rc {self.proc.wait()}) before "
                                         f"{pattern!r}:\n{self.text()[-4000:]}")
                left = deadline - time.monotonic()
                assert left > 0, f"no {pattern!r} within {within_s} s:\n{self.text()[-4000:]}"
                self._changed.wait(min(left, 5.0))

    def finish(self, within_s: float) -> int:
        """Its exit code; a CLI still running after ``within_s`` fails the test with its
        output and every thread's stack (PYTHONFAULTHANDLER prints them on SIGABRT), so a
        hang explains itself in CI's log."""
        try:
            code = self.proc.wait(timeout=within_s)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGABRT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=30)
            self._reader.join(30)
            raise AssertionError(f"tpurl did not exit within {within_s:.0f} s; its output and "
                                 f"its threads' stacks:\n{self.text()[-12000:]}") from None
        self._reader.join(60)  # the last lines (EOF once nothing holds the pipe)
        return code

    def text(self) -> str:
        return "".join(self.lines)


@pytest.fixture
def clis(tmp_path: Path) -> Iterator[list[Cli]]:
    """A CLI still running after its test (the test failed) is killed with its session,
    its programs and its API server, and the kept server with its keeper, so a failure
    leaves nothing behind."""
    started: list[Cli] = []
    yield started
    for cli in started:
        if cli.proc.poll() is None:
            for pid in _descendants(cli.proc.pid):
                _kill(pid)
            os.killpg(cli.proc.pid, signal.SIGKILL)
            cli.proc.wait(30)
    for pid in _kept_server(tmp_path / "cache"):
        _kill(pid)


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def _program_of(cli: Cli, within_s: float = 120.0) -> int:
    """The stage's program: the CLI's child in a session of its own that is neither its API
    server nor the kept server's keeper (flows/backends/local/backend.py starts each program
    so, flows/console/api_server.py the server, flows/console/kept_api.py the keeper)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        table = _live(_processes())
        for pid, (ppid, sid, _) in table.items():
            command = _cmdline(pid)
            if ppid == cli.proc.pid and sid == pid and "uvicorn" not in command \
                    and "flows.console.kept_api" not in command:
                return pid
        time.sleep(0.05)
    raise AssertionError(f"no program of the stage started:\n{cli.text()[-4000:]}")


def _kept_server(cache: Path) -> set[int]:
    """The kept server's keeper and everything under it (its own session and the API
    server it runs): what is meant to outlive a command."""
    keepers = {json.loads(state.read_text())["keeper"]["pid"]
               for state in cache.glob("api-server/*/state.json")}
    return {pid for keeper in keepers for pid in {keeper} | _descendants(keeper)}


def _left_running(watched: set[int], sessions: set[int], marker: str,
                  kept: set[int]) -> list[str]:
    table = _live(_processes())
    return [f"{pid} {_cmdline(pid)[:200]}" for pid, (_, sid, _) in table.items()
            if pid not in kept and (pid in watched or sid in sessions or marker in _cmdline(pid))]


def _all_gone(watched: set[int], sessions: set[int], marker: str, within_s: float,
              kept: set[int] = frozenset()) -> None:
    deadline = time.monotonic() + within_s
    while (left := _left_running(watched, sessions, marker, kept)) and \
            time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, f"still running after the CLI exited: {left}"


def _slot(home: Path) -> int:
    """The profile lock's taken slots in the API's database (read beside a kept server)."""
    with sqlite3.connect(home / "prefect.db") as db:
        (active,) = db.execute("SELECT active_slots FROM concurrency_limit_v2 WHERE name = ?",
                               (lock_name(PROFILE),)).fetchone()
    return int(active)


def _stop_in(cli: Cli, stage: str, signum: int, cache: Path) -> tuple[set[int], set[int]]:
    """Waits until a program of ``stage`` runs, then sends ``signum`` as a user would; the
    processes and sessions that must be gone afterwards (the kept server's are not)."""
    cli.wait_for(rf"Task run '{stage}: [^']*' - [\w.-]+: starting `", STAGE_WITHIN_S)
    program = _program_of(cli)
    kept = _kept_server(cache)
    watched = _descendants(cli.proc.pid) - kept
    table = _processes()
    sessions = {cli.proc.pid, program} | {table[p][1] for p in watched if p in table}
    if signum == signal.SIGINT:
        os.killpg(cli.proc.pid, signal.SIGINT)  # Ctrl-C: the whole foreground group
    else:
        os.kill(cli.proc.pid, signum)
    return watched | {cli.proc.pid}, sessions


def _pid_tags(tmp_path: Path) -> list[Path]:
    """The programs' pid tags (flows/core/processes.py ProcessTag) in the venvs' and the
    stages' log folders."""
    return sorted(tmp_path.glob("venvs/tpurl-logs/*.pid")) + \
        sorted(tmp_path.glob("root/**/tpurl-logs/*.pid"))


def _statuses(out: str) -> dict[str, str]:
    """Each stage's end in the run's output ("<stage> ran in 12.3 s → …", logged by the
    stage's task: flows/pipeline.py _execute)."""
    return dict(re.findall(r"Task run '\w+: [^']*' - (\w+) (ran|skipped) in [\d.]+ s", out))


def _under(prefix: Path, source: Path) -> Path:
    """Where Python keeps the bytecode of ``source``'s files under PYTHONPYCACHEPREFIX."""
    return prefix / source.relative_to(source.anchor)


def _interpreter_home(venv: Path) -> Path | None:
    """The installation a venv was made from (its pyvenv.cfg ``home``, the bin folder)."""
    config = venv / "pyvenv.cfg"
    if not config.is_file():
        return None
    for line in config.read_text().splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "home":
            return Path(value.strip()).parent
    return None


def _seed_bytecode(shared: Layout, venvs: Path) -> None:
    """This test's venvs' bytecode prefix starts with the repository venvs' bytecode, linked
    under this test's venv paths; the interpreters' own libraries and the rehearsal's
    scripts (images/rehearsal, which the programs import from) keep their paths. Nothing to
    link before any program has run."""
    source, target = shared.venv_dir().parent / BYTECODE_DIR, venvs / BYTECODE_DIR
    pairs = [(shared.venv_dir(), venvs / "rehearsal"),
             (shared.hf_check_venv_dir(), venvs / "hf-check"), (REHEARSAL_DIR, REHEARSAL_DIR)]
    pairs += [(home, home) for venv in (shared.venv_dir(), shared.hf_check_venv_dir())
              if (home := _interpreter_home(venv)) is not None]
    for theirs, ours in pairs:
        if _under(source, theirs).is_dir():
            shutil.copytree(_under(source, theirs), _under(target, ours), symlinks=True,
                            copy_function=_link_or_copy, dirs_exist_ok=True)


def _link_or_copy(source: str, target: str) -> None:
    """A hard link (Python replaces a stale .pyc by renaming a new file over it, so the
    shared one is never written through it), or a copy where the temporary directory is
    on another file system (a tmpfs)."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def test_stopped_in_every_stage_then_resumed(tmp_path: Path, clis: list[Cli]) -> None:
    home, venvs, cache = tmp_path / "prefect-home", tmp_path / "venvs", tmp_path / "cache"
    seed_home(home)  # migrated: tests/support/prefect_database.py
    repository = Layout(load_profile(PROFILE, {}, environ={}))
    shared = repository.venv_dir().parent / JAX_CACHE_DIR
    shared.mkdir(parents=True, exist_ok=True)
    venvs.mkdir()
    (venvs / JAX_CACHE_DIR).symlink_to(shared, target_is_directory=True)
    _seed_bytecode(repository, venvs)
    overrides = [f"local.root={tmp_path / 'root'}", f"local.venv={venvs / 'rehearsal'}",
                 f"local.hf_check_venv={venvs / 'hf-check'}"]
    argv = [str(TPURL), "run", PROFILE, *(a for o in overrides for a in ("--set", o))]
    resume = f"To resume: tpurl run {PROFILE} " + " ".join(f"--set {o}" for o in overrides)
    # its own Prefect home (the private API's database, the lock in it) and cache (command
    # logs): never shared with another run on the machine
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update({"PREFECT_HOME": str(home), "TPURL_CACHE_DIR": str(cache),
                "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "COLUMNS": "10000",
                "PYTHONFAULTHANDLER": "1"})  # a hung CLI's stacks (Cli.finish)
    finished = 0  # the stages that finished in the runs before this one
    killed = False  # the run before was SIGKILLed: its lock is left to this run to free
    started = time.monotonic()
    for stage, signum in PLAN:
        env["TPURL_KEEP_API_S"] = "0" if stage in OWN_SERVER_STAGES else KEEP_API_S
        cli = Cli(argv, env)
        clis.append(cli)
        watched, sessions = _stop_in(cli, stage, signum, cache)
        code = cli.finish(180)
        out, name = cli.text(), signal.Signals(signum).name
        kept = _kept_server(cache)
        assert bool(kept) == (stage not in OWN_SERVER_STAGES), (stage, kept)
        # SIGKILL: the program and an own API server by PR_SET_PDEATHSIG
        _all_gone(watched, sessions, str(tmp_path), 60, kept)
        assert f"holding {lock_name(PROFILE)}" in out
        # every log went to the run's API: none started a server of Prefect's own (a thread
        # that lost the run's settings did, and its log worker held the exit 20-30 s)
        assert TEMPORARY_SERVER not in out and "APILogWorker" not in out, out[-4000:]
        assert "could not tidy" not in out, out[-4000:]  # a half-made venv tidies too
        # a dead holder on this host is freed at once (and only after a SIGKILL)
        # (its lease died with the private API server, so by the slot: flows/locking/profile_lock.py)
        freed = re.search(r"which is gone \(its process \(pid \d+\) is no longer running on "
                          r"this host\): free(d its lease|ing the slot)", out)
        assert (freed is not None) is killed, out[-4000:]
        reached = STAGES.index(stage)
        assert _statuses(out) == {**dict.fromkeys(STAGES[:finished], "skipped"),
                                  **dict.fromkeys(STAGES[finished:reached], "ran")}, \
            out[-4000:]  # resumed: what finished before is skipped, not run again
        finished, killed = reached, signum == signal.SIGKILL
        if killed:  # nothing ran its cleanup: the slot stays taken, the pid tag stays
            assert code == -signal.SIGKILL and _slot(home) == 1, out[-4000:]
            continue
        assert code == 128 + signum, out[-4000:]
        assert f"interrupted ({name}) during stage {stage}: its program was stopped" in out
        assert resume in out, out[-2000:]
        assert ABORTED[signum] in out  # Prefect recorded how the flow run ended
        assert _slot(home) == 0, f"the lock was left taken after {name} in {stage}"
        assert not _pid_tags(tmp_path)  # the program's tag goes with it
    cli = Cli(argv, env)
    clis.append(cli)
    assert cli.finish(STAGE_WITHIN_S) == 0, cli.text()[-4000:]
    out = cli.text()
    assert _statuses(out) == {**dict.fromkeys(STAGES[:-1], "skipped"), STAGES[-1]: "ran"}, \
        out[-3000:]
    assert "which is gone" not in out and _slot(home) == 0 and not _pid_tags(tmp_path)
    assert TEMPORARY_SERVER not in out, out[-4000:]
    kept = _kept_server(cache)
    stop = subprocess.run([str(TPURL), "api-server", "stop"], cwd=REPO_ROOT, env=env,
                          text=True, capture_output=True, timeout=60, check=False)
    assert stop.returncode == 0 and "stopped the kept Prefect API server" in stop.stdout, \
        stop.stdout + stop.stderr
    _all_gone(kept, set(), str(tmp_path), 30)
    # the Qwen3 dense family's proof, on what the resumed runs left: this profile's only
    # complete pipeline in the suite (tests/e2e/test_rehearsal_families.py says why)
    settings = dict(o.split("=", 1) for o in overrides)
    assert_family_outputs(PROFILE, Layout(load_profile(PROFILE, settings, environ=env)))
    print(f"\n{len(PLAN)} stops and {len(PLAN) + 1} runs of `tpurl run {PROFILE}` in "
          f"{time.monotonic() - started:.0f} s")
