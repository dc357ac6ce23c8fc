"""A Prefect API server kept between `tpurl` commands, only when the user asks for one
(`tpurl api-server start`, or ``TPURL_KEEP_API_S`` set to a number of seconds): a command
then does not pay the server's start-up (9-12 s of CPU importing Prefect's server). Without
that request no process outlives a command: `tpurl run` starts a server of its own that dies
with it (flows/console/api_server.py), or none when every stage is already done
(flows/console/finished.py).

A kept server is a *keeper*: a small process in a session of its own (no terminal signal
reaches it, and it outlives the command) that launches the same server
`flows/console/api_server.py` launches and stops it, and itself, once nobody used it for
``TPURL_KEEP_API_S`` seconds (default 900 for `tpurl api-server start`). Later commands
find it through a state file in the cache directory.

- Only its user can use it: the command that starts the keeper binds the listening socket
  and passes it down (the keeper holds it as long as it lives, so no other process can
  listen on that port meanwhile), with a random auth string by environment; the state file
  that records port and auth string is 0600 in a 0700 directory owned by the user. Before a
  command sends anything (not even the health check) it proves the port's listener is the
  socket the recorded keeper holds, owned by this user (flows/console/listener.py); if not,
  it refuses and says so.
- Never two: a command decides under an exclusive ``flock`` of the state directory whether to
  reuse, replace or start, so two commands at once share one server.
- Stale ones are replaced: a state whose keeper is gone, or whose server was started for
  another Prefect version, another interpreter, other Prefect settings or other code of
  ours (``server_key``), is stopped (only a keeper process we recorded, checked by its start
  time) and started again. A server that does not become healthy is stopped and the command
  fails with the server's log, as before.
- In use is never idle: each command registers itself (``in-use/<pid>``) while it runs, so a
  run longer than the idle time keeps its server; a command that died leaves a file whose
  pid is gone, which counts for nothing.
- `tpurl api-server start|status|stop` starts, shows and stops it.

Everything else (Ctrl-C, the profile's lock, the run's record, events, artifacts) is the
same as with a per-command server: the CLI still drains its logs and events before it exits.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from flows.common.paths import default_cache_dir
from flows.console.api_server import (
    ApiServer,
    client_environment,
    listening_socket,
    new_auth_string,
    server_environment,
)
from flows.console.listener import ownership_problem
from flows.core.processes import ProcessTag

KEEP_ENV = "TPURL_KEEP_API_S"
DEFAULT_KEEP_S = 900.0  # what `tpurl api-server start` keeps it when KEEP_ENV is unset
POLL_S = 2.0  # how often the keeper looks at its server and its users
KEEPER_AUTH_ENV = "TPURL_KEPT_API_AUTH"  # the keeper's auth string, by environment only
_PROTOCOL = "2"  # bump when the state file's meaning changes


class KeptApiError(RuntimeError):
    """The kept server could not be had; the message says why and where its log is."""


def keep_seconds(environ: Mapping[str, str], default: float = 0.0) -> float:
    """``TPURL_KEEP_API_S``: seconds of idleness before the kept server stops; 0 (the
    default: nobody asked for one) for none."""
    text = environ.get(KEEP_ENV, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        raise KeptApiError(f"{KEEP_ENV}={text!r} is not a number of seconds; fix: set it to "
                           "e.g. 900 (keep the API server 15 min after its last use) or 0 "
                           "(a server per command)") from None
    if value < 0:
        raise KeptApiError(f"{KEEP_ENV}={text!r} is negative; fix: 0 or more seconds")
    return value


def server_key(env: Mapping[str, str]) -> str:
    """Two commands may share a server only when it is the one each would have started."""
    from importlib.metadata import version

    ours = b"".join(Path(__file__).with_name(name).read_bytes()
                    for name in ("api_server.py", "kept_api.py", "listener.py"))
    parts = {"protocol": _PROTOCOL, "prefect": version("prefect"), "python": sys.executable,
             "ours": hashlib.sha256(ours).hexdigest(),
             "settings": sorted((k, v) for k, v in env.items() if k.startswith("PREFECT_"))}
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class KeptState:
    keeper: ProcessTag
    port: int
    key: str
    keep_s: float
    auth_string: str = field(repr=False)

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api"


def private_dir(path: Path) -> None:
    """``path`` as a directory only this user can enter (0700), refused when another user
    owns it (one who made it first could read or swap what is kept there)."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    owner = path.stat().st_uid
    if owner != os.getuid():
        raise KeptApiError(f"{path} belongs to uid {owner}, not to you (uid {os.getuid()}); "
                           "fix: remove it, or point TPURL_CACHE_DIR at a directory of yours")
    path.chmod(0o700)


def write_private(path: Path, text: str) -> None:
    """Write ``path`` whole (a reader sees the old text or the new), readable by this user
    only from its first byte."""
    partial = path.with_name(f"{path.name}.{os.getpid()}")
    with contextlib.suppress(FileNotFoundError):
        partial.unlink()
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(text)
    partial.replace(path)


def being_written(name: str) -> bool:
    """Is ``name`` a ``write_private`` partial file (``<name>.<writer pid>``) whose writer
    still runs? Then it is about to be renamed, not a file to judge or remove; one whose
    writer is gone is a crashed write's leftover."""
    found = re.fullmatch(r".+\.(\d+)", name)
    writer = int(found[1]) if found else 0
    if writer == 0:  # no writer named (pid 0 would signal our own process group)
        return False
    try:
        os.kill(writer, 0)
    except (ProcessLookupError, OverflowError):  # gone, or no pid at all
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


class StateDir:
    """The files one kept server is known by: ``state.json``, ``lock``, ``last-used``,
    ``in-use/<pid>`` and the keeper's own output ``keeper.log``."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @classmethod
    def for_database(cls, env: Mapping[str, str], cache: Path | None = None) -> StateDir:
        """One kept server per Prefect home (its SQLite database): never two on one."""
        home = Path(env.get("PREFECT_HOME") or Path.home() / ".prefect").expanduser().resolve()
        name = hashlib.sha256(str(home).encode()).hexdigest()[:16]
        return cls((cache or default_cache_dir()) / "api-server" / name)

    def read(self) -> KeptState | None:
        try:
            raw = json.loads((self.root / "state.json").read_text())
            return KeptState(keeper=ProcessTag(**raw["keeper"]), port=int(raw["port"]),
                             key=str(raw["key"]), keep_s=float(raw["keep_s"]),
                             auth_string=str(raw["auth_string"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def write(self, state: KeptState) -> None:
        write_private(self.root / "state.json",
                      json.dumps({**asdict(state), "keeper": asdict(state.keeper)}))

    def make(self) -> None:
        """The state directory and its parent, this user's alone."""
        private_dir(self.root.parent)
        private_dir(self.root)

    def forget(self, keeper_pid: int) -> None:
        """Remove the state file if it still names this keeper (a newer one may own it)."""
        if (state := self.read()) is not None and state.keeper.pid == keeper_pid:
            with contextlib.suppress(FileNotFoundError):
                (self.root / "state.json").unlink()

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        self.make()
        with (self.root / "lock").open("a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def users(self) -> list[ProcessTag]:
        """The commands using the server now (files of dead commands are removed). Called
        without the lock (the keeper's idle check, `tpurl api-server status`) while commands
        register: a registration still being written is left to its writer, and one renamed
        or removed since the listing is skipped."""
        live = []
        for path in sorted((self.root / "in-use").glob("*")):
            if being_written(path.name):
                continue
            try:
                tag = ProcessTag.from_json(path.read_text()) if path.is_file() else None
            except FileNotFoundError:
                continue
            if tag is not None and tag.alive():
                live.append(tag)
            else:
                with contextlib.suppress(OSError):
                    path.unlink()
        return live

    def register(self, pid: int) -> Path:
        folder = self.root / "in-use"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / str(pid)
        write_private(path, ProcessTag.of(pid, "tpurl command").to_json())
        return path

    def last_used(self, default: float) -> float:
        try:
            return (self.root / "last-used").stat().st_mtime
        except OSError:
            return default

    def touch(self) -> None:
        (self.root / "last-used").touch()


def idle_for(now: float, last_used: float, started: float, users: int) -> float:
    """Seconds without a user: 0 while any command uses the server."""
    return 0.0 if users else max(0.0, now - max(last_used, started))


def running(tag: ProcessTag) -> bool:
    """The recorded process, and not a zombie nobody reaped yet (an orphaned keeper's parent
    may be an init that does not reap)."""
    if not tag.alive():
        return False
    try:
        stat = Path(f"/proc/{tag.pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def stop_keeper(tag: ProcessTag, wait_s: float = 15.0) -> bool:
    """SIGTERM to a keeper we recorded (its start time checked, so never a recycled pid);
    it stops its server first. True once it is gone."""
    if not running(tag):
        return True
    with contextlib.suppress(ProcessLookupError):
        os.kill(tag.pid, signal.SIGTERM)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(tag.pid, os.WNOHANG)  # our own child when this command started it
        if not running(tag):
            return True
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.kill(tag.pid, signal.SIGKILL)
    return False


def _launch_keeper(folder: StateDir, env: dict[str, str], key: str, keep_s: float) -> KeptState:
    """The keeper, handed the socket this command bound (so the port is ours from the
    bind on) and the auth string by environment (argv is readable by every local user)."""
    auth_string = new_auth_string()
    log_fd = os.open(folder.root / "keeper.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with listening_socket() as sock, os.fdopen(log_fd, "ab") as log:
        port = int(sock.getsockname()[1])
        process = subprocess.Popen(
            [sys.executable, "-m", "flows.console.kept_api", str(folder.root),
             str(sock.fileno()), str(keep_s)], env={**env, KEEPER_AUTH_ENV: auth_string},
            pass_fds=(sock.fileno(),), start_new_session=True, stdin=subprocess.DEVNULL,
            stdout=log, stderr=subprocess.STDOUT)
    state = KeptState(keeper=ProcessTag.of(process.pid, "tpurl kept API keeper"), port=port,
                      key=key, keep_s=keep_s, auth_string=auth_string)
    folder.write(state)
    folder.touch()
    return state


@dataclass
class Lease:
    """One command's use of the kept server: ``wait`` for health, ``release`` when done."""

    folder: StateDir
    state: KeptState
    started_it: bool
    registration: Path

    @property
    def api_url(self) -> str:
        return self.state.api_url

    @property
    def client_env(self) -> dict[str, str]:
        return client_environment(self.api_url, self.state.auth_string)

    def prove_ownership(self) -> None:
        """Refuse a port whose listener is not the recorded keeper's socket, owned by this
        user: nothing, not even a health check, is sent to it."""
        if problem := ownership_problem(self.state.port, self.state.keeper.pid):
            raise KeptApiError(
                f"refusing the kept Prefect API server at {self.state.api_url}: {problem}; "
                "nothing was sent to it. fix: `tpurl api-server stop` forgets it (the next "
                "command starts a server of its own), and look at who listens there "
                f"(`ss -ltnp 'sport = :{self.state.port}'`)")

    def wait(self, timeout_s: float) -> None:
        import urllib.error
        import urllib.request

        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            current = self.folder.read()
            if current is None or current.keeper.pid != self.state.keeper.pid \
                    or not running(current.keeper):
                raise KeptApiError("tpurl's kept Prefect API server stopped before it was "
                                   f"healthy; its output: {self.folder.root / 'keeper.log'}")
            self.prove_ownership()
            with contextlib.suppress(urllib.error.URLError, OSError), \
                    urllib.request.urlopen(f"{current.api_url}/health", timeout=2) as answer:
                if answer.status == 200:
                    return
            time.sleep(0.1)
        stop_keeper(self.state.keeper)
        self.folder.forget(self.state.keeper.pid)
        raise KeptApiError(f"tpurl's kept Prefect API server was not healthy within "
                           f"{timeout_s:.0f} s, and was stopped; its output: "
                           f"{self.folder.root / 'keeper.log'}; set PREFECT_API_URL to a "
                           "running server (`prefect server start`) to use that instead")

    def release(self) -> None:
        with contextlib.suppress(OSError):
            self.registration.unlink()
        with contextlib.suppress(OSError):
            self.folder.touch()


class KeptServerBusy(RuntimeError):
    """The Prefect home's kept server was started for other settings and other commands use
    it now: it cannot be replaced under them, so this command gets a server of its own."""


def acquire(environ: Mapping[str, str], keep_s: float, cache: Path | None = None,
            start: bool = True) -> Lease | None:
    """The kept server of this Prefect home: reused when alive and started for these
    settings, else (re)started (``start=False``: None instead, nobody asked for one);
    registered as in use by this process until ``release``. Raises KeptServerBusy when a
    server for other settings is in use by other commands."""
    env = server_environment(environ)
    key = server_key(env)
    folder = StateDir.for_database(env, cache)
    if not start and folder.read() is None:  # the common case: no lock, no directory made
        return None
    with folder.locked():
        state = folder.read()
        started = False
        if state is None or state.key != key or not running(state.keeper):
            if not start:
                return None
            if state is not None and running(state.keeper):
                if folder.users():
                    raise KeptServerBusy(f"the kept Prefect API server at {state.api_url} was "
                                         "started for other settings and is in use")
                stop_keeper(state.keeper)
            state = _launch_keeper(folder, env, key, keep_s)
            started = True
        registration = folder.register(os.getpid())
    return Lease(folder, state, started, registration)


def kept_servers(cache: Path | None = None) -> list[tuple[StateDir, KeptState]]:
    root = (cache or default_cache_dir()) / "api-server"
    found = []
    for path in sorted(root.glob("*")) if root.is_dir() else []:
        folder = StateDir(path)
        if (state := folder.read()) is not None and running(state.keeper):
            found.append((folder, state))
    return found


def status_lines(cache: Path | None = None, now: float | None = None) -> list[str]:
    now = time.time() if now is None else now
    servers = kept_servers(cache)
    if not servers:
        return ["no kept Prefect API server is running"]
    lines = []
    for folder, state in servers:
        users = folder.users()
        idle = idle_for(now, folder.last_used(state.keeper.started_at), state.keeper.started_at,
                        len(users))
        use = (f"in use by {len(users)} command(s)" if users else
               f"idle {idle:.0f} s, stops after {state.keep_s:.0f} s idle")
        lines.append(f"{state.api_url} (keeper pid {state.keeper.pid}; {use})")
    return lines


def stop_all(cache: Path | None = None) -> list[str]:
    """Stop every kept server, and forget a recorded one whose keeper is gone (its port is
    no longer ours: nothing may be sent there)."""
    lines = []
    for folder, state in kept_servers(cache):
        with folder.locked():
            gone = stop_keeper(state.keeper)
            folder.forget(state.keeper.pid)
        lines.append(f"stopped the kept Prefect API server at {state.api_url}" if gone else
                     f"killed the kept Prefect API server's keeper (pid {state.keeper.pid})")
    root = (cache or default_cache_dir()) / "api-server"
    for path in sorted(root.glob("*/state.json")) if root.is_dir() else []:
        if (recorded := StateDir(path.parent).read()) is not None:
            StateDir(path.parent).forget(recorded.keeper.pid)
    return lines or ["no kept Prefect API server is running"]


def start_command(environ: Mapping[str, str], timeout_s: float = 120.0) -> list[str]:
    """`tpurl api-server start`: the user asks for a kept server (``TPURL_KEEP_API_S``
    seconds after its last use, default 900)."""
    keep_s = keep_seconds(environ, default=DEFAULT_KEEP_S) or DEFAULT_KEEP_S
    lease = acquire(environ, keep_s)
    assert lease is not None  # start=True: reused or started
    try:
        lease.wait(timeout_s)
    finally:
        lease.release()
    verb = "started" if lease.started_it else "already running:"
    return [f"{verb} a kept Prefect API server at {lease.api_url}; it stops after "
            f"{lease.state.keep_s:.0f} s unused (`tpurl api-server stop` stops it now)"]


def keep(folder: StateDir, fd: int, keep_s: float) -> int:
    """The keeper's life: run the server on the socket it was handed (held until the end),
    stop it when idle, when it is told to, or when another keeper took its place; the
    server dies with the keeper in any case."""
    me = os.getpid()
    stopping: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, frame: stopping.append(signum))
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    env = dict(os.environ)
    auth_string = env.pop(KEEPER_AUTH_ENV)
    os.environ.pop(KEEPER_AUTH_ENV, None)
    server = ApiServer(env=env, sock=socket.socket(fileno=fd), auth_string=auth_string)
    started = time.time()
    try:
        while not stopping:
            if server.process.poll() is not None:
                print(f"the server exited with code {server.process.returncode}", flush=True)
                return 1
            state = folder.read()
            # replaced or forgotten (the command that started it writes the state just after
            # the start, so a missing one counts only after the first seconds)
            if (state is None and time.time() - started > 10) or (
                    state is not None and state.keeper.pid != me):
                return 0
            idle = idle_for(time.time(), folder.last_used(started), started, len(folder.users()))
            if idle > keep_s:
                print(f"idle for {idle:.0f} s: stopping", flush=True)
                return 0
            time.sleep(POLL_S)
        return 0
    finally:
        server.stop()
        folder.forget(me)


if __name__ == "__main__":
    raise SystemExit(keep(StateDir(Path(sys.argv[1])), int(sys.argv[2]), float(sys.argv[3])))
