"""The kept API server's state and who may use it (flows/console/kept_api.py), without a
Prefect server: the state file and its directory, the key that decides sharing, the lease's
proof of ownership, reuse or refusal under a running command, and the keeper's launch,
through a stand-in interpreter (``sys.executable`` for the test's length) that records how it
was started. tests/test_kept_api.py runs the real keeper and server."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from flows.console import kept_api
from flows.console.api_server import server_environment
from flows.console.kept_api import (
    KEEPER_AUTH_ENV,
    KeptApiError,
    KeptServerBusy,
    KeptState,
    Lease,
    StateDir,
    acquire,
    keep_seconds,
    kept_servers,
    private_dir,
    running,
    server_key,
    status_lines,
    stop_all,
    stop_keeper,
    write_private,
)
from flows.core.processes import ProcessTag
from tests.support.polling import until

STAND_IN = r'''#!{python}
import json, os, sys, time
fd = int(sys.argv[4])
with open(os.environ["STAND_IN_RECORD"], "w") as out:
    json.dump({{"argv": sys.argv[1:], "auth": os.environ.get("{auth}"), "sid": os.getsid(0),
               "pid": os.getpid(), "fd_listens": os.path.exists(f"/proc/self/fd/{{fd}}"),
               "stdin": os.readlink("/proc/self/fd/0")}}, out)
print("keeper output", flush=True)
print("keeper error", file=sys.stderr, flush=True)
time.sleep(60)
'''


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _tag(pid: int) -> ProcessTag:
    return ProcessTag.of(pid, "test keeper")


def _state(keeper: ProcessTag, key: str = "k", port: int = 1, keep_s: float = 900.0,
           auth: str = "s3cret") -> KeptState:
    return KeptState(keeper=keeper, port=port, key=key, keep_s=keep_s, auth_string=auth)


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A live process of ours that a test may record as a keeper and stop."""
    process = subprocess.Popen(["sleep", "60"])
    yield process
    process.kill()
    process.wait()


@pytest.fixture
def stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The stand-in as this process's interpreter (a keeper a test launches, even by mistake,
    is the stand-in, stopped at the end); its record's path is returned."""
    script = tmp_path / "python"
    script.write_text(STAND_IN.format(python=sys.executable, auth=KEEPER_AUTH_ENV))
    script.chmod(0o755)
    record = tmp_path / "record.json"
    monkeypatch.setenv("STAND_IN_RECORD", str(record))
    monkeypatch.setattr(sys, "executable", str(script))
    yield record
    with contextlib.suppress(OSError, ValueError):
        os.kill(json.loads(record.read_text())["pid"], signal.SIGKILL)


def test_a_keep_time_of_zero_or_more_seconds_is_read_and_the_rest_refused() -> None:
    assert keep_seconds({"TPURL_KEEP_API_S": "0"}, default=5) == 0
    assert keep_seconds({"TPURL_KEEP_API_S": "  "}, default=5) == 5
    assert keep_seconds({"TPURL_KEEP_API_S": "0.5"}) == 0.5
    with pytest.raises(KeptApiError) as negative:
        keep_seconds({"TPURL_KEEP_API_S": "-0.5"})
    assert str(negative.value) == "TPURL_KEEP_API_S='-0.5' is negative; fix: 0 or more seconds"
    with pytest.raises(KeptApiError) as word:
        keep_seconds({"TPURL_KEEP_API_S": "15m"})
    assert str(word.value) == (
        "TPURL_KEEP_API_S='15m' is not a number of seconds; fix: set it to e.g. 900 (keep the "
        "API server 15 min after its last use) or 0 (a server per command)")
    assert word.value.__cause__ is None and word.value.__suppress_context__


def test_the_key_is_the_version_the_interpreter_our_code_and_the_prefect_settings(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from importlib.metadata import version

    env = {"PREFECT_HOME": "/h", "PREFECT_X": "1", "HOME": "/root"}
    folder = Path(kept_api.__file__).parent
    ours = b"".join((folder / name).read_bytes()
                    for name in ("api_server.py", "kept_api.py", "listener.py"))
    parts = {"protocol": "2", "prefect": version("prefect"), "python": sys.executable,
             "ours": hashlib.sha256(ours).hexdigest(),
             "settings": [["PREFECT_HOME", "/h"], ["PREFECT_X", "1"]]}
    assert server_key(env) == hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:16]
    assert server_key({**env, "HOME": "/elsewhere"}) == server_key(env)  # not a setting
    assert server_key({**env, "PREFECT_X": "2"}) != server_key(env)
    monkeypatch.setattr(sys, "executable", "/another/python")
    assert server_key(env) != hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:16]


def test_a_private_directory_is_this_users_alone(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    made = tmp_path / "a" / "b"
    private_dir(made)
    assert _mode(made) == 0o700
    opened = tmp_path / "opened"
    opened.mkdir(mode=0o755)
    opened.chmod(0o755)
    private_dir(opened)  # an existing one is closed
    assert _mode(opened) == 0o700
    old_mask = os.umask(0)
    try:
        with monkeypatch.context() as no_chmod:  # closed from its creation, not only after
            no_chmod.setattr(Path, "chmod", lambda self, mode: None)
            private_dir(tmp_path / "new")
        assert _mode(tmp_path / "new") == 0o700
    finally:
        os.umask(old_mask)
    me = os.getuid()
    monkeypatch.setattr(os, "getuid", lambda: me + 1)  # as if another user made it first
    with pytest.raises(KeptApiError) as other:
        private_dir(opened)
    assert str(other.value) == (f"{opened} belongs to uid {me}, not to you (uid {me + 1}); fix: "
                                "remove it, or point TPURL_CACHE_DIR at a directory of yours")


def test_a_private_file_is_written_whole_and_0600_over_a_stale_partial(tmp_path: Path) -> None:
    old_mask = os.umask(0)
    try:
        target = tmp_path / "state.json"
        (tmp_path / f"state.json.{os.getpid()}").write_text("a stale partial")
        write_private(target, "new")
        assert target.read_text() == "new" and _mode(target) == 0o600
        assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]
        write_private(target, "newer")
        assert target.read_text() == "newer" and _mode(target) == 0o600
    finally:
        os.umask(old_mask)


def test_the_state_file_round_trips_and_a_damaged_one_is_none(tmp_path: Path) -> None:
    folder = StateDir(tmp_path)
    assert folder.read() is None
    state = _state(_tag(os.getpid()), key="abc", port=4242, keep_s=1.5)
    folder.write(state)
    assert folder.read() == state and _mode(tmp_path / "state.json") == 0o600
    good = json.loads((tmp_path / "state.json").read_text())
    for damage in ({"port": "x"}, {"keeper": "x"}, {"keeper": {"pid": 1}}, {"keep_s": None},
                   {"port": None}):
        (tmp_path / "state.json").write_text(json.dumps({**good, **damage}))
        assert folder.read() is None, damage
    for field in good:
        (tmp_path / "state.json").write_text(json.dumps({k: v for k, v in good.items()
                                                         if k != field}))
        assert folder.read() is None, field
    (tmp_path / "state.json").write_text("{")
    assert folder.read() is None


def test_one_state_directory_per_prefect_home(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    def name(home: Path) -> str:
        return hashlib.sha256(str(home).encode()).hexdigest()[:16]

    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    cache = tmp_path / "cache"
    (tmp_path / "home").mkdir()
    assert StateDir.for_database({"PREFECT_HOME": str(tmp_path / "home" / ".." / "home")},
                                 cache).root == cache / "api-server" / name(tmp_path / "home")
    assert StateDir.for_database({"PREFECT_HOME": "~/p"}, cache).root == \
        cache / "api-server" / name(tmp_path / "user" / "p")
    assert StateDir.for_database({}, cache).root == \
        cache / "api-server" / name(tmp_path / "user" / ".prefect")
    monkeypatch.setenv("TPURL_CACHE_DIR", str(tmp_path / "default"))
    assert StateDir.for_database({}).root.parent == tmp_path / "default" / "api-server"


def test_a_state_is_forgotten_only_for_the_keeper_it_names(tmp_path: Path) -> None:
    folder = StateDir(tmp_path)
    folder.forget(1)  # nothing to forget
    folder.write(_state(_tag(os.getpid())))
    folder.forget(os.getpid() + 1)
    assert folder.read() is not None
    folder.forget(os.getpid())
    assert not (tmp_path / "state.json").exists()
    state = _state(_tag(os.getpid()))

    class Raced(StateDir):  # the file goes between the read and the unlink
        def read(self) -> KeptState | None:
            return state

    Raced(tmp_path).forget(os.getpid())


def test_the_users_are_the_live_commands_and_dead_ones_are_cleared(
        tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    assert StateDir(tmp_path / "absent" / "s").register(os.getpid()).is_file()
    folder = StateDir(tmp_path / "s")
    folder.make()
    assert _mode(tmp_path / "s") == 0o700 and folder.users() == []
    registration = folder.register(sleeper.pid)
    assert [u.what for u in folder.users()] == ["tpurl command"]
    assert registration == tmp_path / "s" / "in-use" / str(sleeper.pid)
    assert _mode(registration) == 0o600
    assert [u.pid for u in folder.users()] == [sleeper.pid]
    (tmp_path / "s" / "in-use" / "junk").write_text("not a tag")
    (tmp_path / "s" / "in-use" / "folder").mkdir()
    sleeper.kill()
    sleeper.wait()
    assert folder.users() == []
    assert sorted(p.name for p in (tmp_path / "s" / "in-use").iterdir()) == ["folder"]


def test_a_registration_being_written_is_neither_a_user_nor_cleared(
        tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    """``register`` writes ``<pid>.<writer pid>`` first (``write_private``), then renames it:
    while its writer runs, that file is a command registering now, so ``users`` leaves it
    (a keeper sweeping it away made the command's rename fail: FileNotFoundError); once the
    writer is gone it is a crashed write's leftover, and cleared."""
    folder = StateDir(tmp_path / "s")
    folder.make()
    in_use = tmp_path / "s" / "in-use"
    in_use.mkdir()
    writing = in_use / f"{sleeper.pid}.{sleeper.pid}"
    writing.write_text("")  # opened, nothing written yet
    assert folder.users() == [] and writing.exists()
    writing.write_text(ProcessTag.of(sleeper.pid, "tpurl command").to_json()[:20])  # midway
    assert folder.users() == [] and writing.exists()
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    left = in_use / f"{sleeper.pid}.{int(gone.stdout)}"
    left.write_text("")
    assert folder.users() == []
    assert sorted(p.name for p in in_use.iterdir()) == [writing.name]


def test_only_a_partial_file_of_a_live_writer_is_being_written(
        monkeypatch: pytest.MonkeyPatch) -> None:
    me = os.getpid()
    assert kept_api.being_written(f"123.{me}") and kept_api.being_written(f"state.json.{me}")
    for name in (str(me), f"123.{me}.x", "123.", ".", "123.0", "123.00", f"123.{10 ** 30}",
                 "junk"):
        assert not kept_api.being_written(name), name

    def another_users(pid: int, signum: int) -> None:  # what the kernel answers a non-root
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(kept_api.os, "kill", another_users)
    assert kept_api.being_written("123.1")


def test_a_registration_renamed_after_the_listing_hides_no_later_user(
        tmp_path: Path, sleeper: subprocess.Popen[bytes],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A file listed, then renamed away by its writer before it is read, is skipped, and the
    users listed after it are still read."""
    folder = StateDir(tmp_path / "s")
    folder.make()
    vanished = folder.register(1)  # "1" sorts before the sleeper's pid
    folder.register(sleeper.pid)
    read_text = Path.read_text

    def renamed_meanwhile(path: Path, *args: object, **kwargs: object) -> str:
        if path == vanished:
            raise FileNotFoundError(2, "No such file or directory", str(path))
        return read_text(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "read_text", renamed_meanwhile)
    assert [u.pid for u in folder.users()] == [sleeper.pid]


def test_commands_register_while_another_process_reads_the_users(tmp_path: Path) -> None:
    """Real processes, no ordering imposed: one registers and unregisters in a loop (as
    commands start and end) while this one lists the users (as the keeper's idle check and
    `tpurl api-server status` do), in whatever interleaving the scheduler makes."""
    folder = StateDir(tmp_path / "s")
    folder.make()
    script = ("import os, sys\nfrom pathlib import Path\n"
              "from flows.console.kept_api import StateDir\n"
              "folder = StateDir(Path(sys.argv[1]))\n"
              "for _ in range(3000):\n    folder.register(os.getpid()).unlink()\n")
    writer = subprocess.Popen([sys.executable, "-c", script, str(folder.root)],
                              stderr=subprocess.PIPE, text=True)
    reads = 0
    while writer.poll() is None:
        assert all(u.pid == writer.pid for u in folder.users())
        reads += 1
    _, said = writer.communicate()
    assert writer.returncode == 0, said[-2000:]
    assert reads > 10, reads  # the two ran side by side


def test_idle_time_is_never_negative_and_zero_at_the_last_use() -> None:
    assert kept_api.idle_for(now=100, last_used=100, started=50, users=0) == 0
    assert kept_api.idle_for(now=100, last_used=110, started=50, users=0) == 0  # clock skew
    assert kept_api.idle_for(now=100.5, last_used=100, started=50, users=0) == 0.5


def test_last_use_is_the_touch_or_the_default(tmp_path: Path) -> None:
    folder = StateDir(tmp_path)
    assert folder.last_used(default=7.0) == 7.0
    folder.touch()
    assert abs(folder.last_used(default=7.0) - time.time()) < 60


def test_a_zombie_or_a_gone_process_is_not_running() -> None:
    assert running(_tag(os.getpid()))
    child = subprocess.Popen(["true"])
    tag = _tag(child.pid)
    assert until(lambda: Path(f"/proc/{child.pid}/stat").read_text()
                 .rsplit(")", 1)[-1].split()[0] == "Z", 30)
    assert not running(tag)  # exited, not reaped yet
    child.wait()
    assert not running(tag)


def test_a_process_is_read_past_its_name_and_one_gone_midway_is_not_running(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    odd = tmp_path / "x) Z y"  # its /proc stat reads "PID (x) Z y) S ..."
    odd.symlink_to("/bin/sleep")
    process = subprocess.Popen([str(odd), "60"])
    try:
        assert until(lambda: ") Z y)" in Path(f"/proc/{process.pid}/stat").read_text(), 30)
        assert running(_tag(process.pid))
    finally:
        process.kill()
        process.wait()
    monkeypatch.setattr(ProcessTag, "alive", lambda self: True)  # gone after this check
    assert not running(_tag(process.pid))


def test_a_keeper_is_stopped_by_sigterm_or_killed_when_it_ignores_it() -> None:
    polite = subprocess.Popen([sys.executable, "-c", "import signal, sys, time; "
                               "signal.signal(signal.SIGTERM, lambda *a: sys.exit('term')); "
                               "print(flush=True); time.sleep(60)"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE)
    assert polite.stdout is not None and polite.stdout.readline()
    tag = _tag(polite.pid)
    assert stop_keeper(tag) and not running(tag)  # reaped by stop_keeper: its own child
    assert polite.stderr is not None and polite.stderr.read() == b"term\n"  # SIGTERM, no kill
    assert stop_keeper(tag)  # gone already
    spawner = subprocess.run(["sh", "-c", "sleep 60 >/dev/null 2>&1 & echo $!"],
                             capture_output=True, text=True, check=True)
    orphan = _tag(int(spawner.stdout))  # not this process's child: waitpid refuses it
    assert stop_keeper(orphan) and not running(orphan)
    stubborn = subprocess.Popen([sys.executable, "-c", "import signal, sys, time; "
                                 "signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                                 "print(flush=True); time.sleep(60)"], stdout=subprocess.PIPE)
    assert stubborn.stdout is not None and stubborn.stdout.readline()
    assert not stop_keeper(_tag(stubborn.pid), wait_s=0.5)
    assert stubborn.wait() == -signal.SIGKILL


def test_the_lease_refuses_a_port_the_keeper_does_not_hold(
        tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        port = sock.getsockname()[1]
        mine = Lease(StateDir(tmp_path), _state(_tag(os.getpid()), port=port), False,
                     tmp_path / "reg")
        mine.prove_ownership()
        assert mine.client_env["PREFECT_API_AUTH_STRING"] == "s3cret"
        other = Lease(StateDir(tmp_path), _state(_tag(sleeper.pid), port=port), False,
                      tmp_path / "reg")
        with pytest.raises(KeptApiError) as refused:
            other.prove_ownership()
    assert str(refused.value) == (
        f"refusing the kept Prefect API server at http://127.0.0.1:{port}/api: the socket "
        f"listening on port {port} is not the one the keeper (pid {sleeper.pid}) holds; nothing "
        "was sent to it. fix: `tpurl api-server stop` forgets it (the next command starts a "
        f"server of its own), and look at who listens there (`ss -ltnp 'sport = :{port}'`)")


def test_a_released_lease_unregisters_and_counts_as_a_use(tmp_path: Path) -> None:
    folder = StateDir(tmp_path)
    registration = folder.register(os.getpid())
    lease = Lease(folder, _state(_tag(os.getpid())), False, registration)
    lease.release()
    assert not registration.exists() and (tmp_path / "last-used").exists()
    lease.release()  # twice: nothing left to remove
    gone = Lease(StateDir(tmp_path / "gone"), _state(_tag(os.getpid())), False, registration)
    gone.release()  # its directory removed meanwhile: nothing to touch, no error


def _acquire_env(tmp_path: Path) -> dict[str, str]:
    return {"PREFECT_HOME": str(tmp_path / "home"), "PATH": os.environ["PATH"],
            "STAND_IN_RECORD": os.environ.get("STAND_IN_RECORD", "")}


def test_without_a_request_no_server_and_no_directory(tmp_path: Path, stand_in: Path) -> None:
    env = _acquire_env(tmp_path)
    assert acquire(env, 0, cache=tmp_path / "cache", start=False) is None
    assert not (tmp_path / "cache").exists()
    folder = StateDir.for_database(server_environment(env), tmp_path / "cache")
    folder.make()
    folder.write(_state(_tag(os.getpid()), key="another"))  # started for other settings
    assert acquire(env, 0, cache=tmp_path / "cache", start=False) is None


def test_a_server_for_these_settings_is_reused_and_registered(
        tmp_path: Path, stand_in: Path, sleeper: subprocess.Popen[bytes]) -> None:
    env = _acquire_env(tmp_path)
    folder = StateDir.for_database(server_environment(env), tmp_path / "cache")
    folder.make()
    state = _state(_tag(sleeper.pid), key=server_key(server_environment(env)))
    folder.write(state)
    for start in (True, False):
        lease = acquire(env, 0, cache=tmp_path / "cache", start=start)
        assert lease is not None and lease.state == state and lease.started_it is False
        assert lease.registration == folder.root / "in-use" / str(os.getpid())
        assert lease.api_url == state.api_url and lease.folder.root == folder.root
        assert [u.pid for u in folder.users()] == [os.getpid()]
        lease.release()
    assert sleeper.poll() is None and not stand_in.exists()  # nothing stopped, nothing started


def test_a_server_for_other_settings_is_never_replaced_under_a_running_command(
        tmp_path: Path, stand_in: Path, sleeper: subprocess.Popen[bytes]) -> None:
    env = _acquire_env(tmp_path)
    folder = StateDir.for_database(server_environment(env), tmp_path / "cache")
    folder.make()
    folder.write(_state(_tag(sleeper.pid), key="another", port=4242))
    folder.register(os.getpid())
    with pytest.raises(KeptServerBusy, match=r"at http://127.0.0.1:4242/api was started for "
                       "other settings and is in use"):
        acquire(env, 0, cache=tmp_path / "cache")
    assert sleeper.poll() is None and folder.read() is not None


def test_the_keeper_gets_the_socket_and_the_auth_string_by_environment_never_argv(
        tmp_path: Path, stand_in: Path, sleeper: subprocess.Popen[bytes]) -> None:
    env = _acquire_env(tmp_path)
    folder = StateDir.for_database(server_environment(env), tmp_path / "cache")
    folder.make()
    old = _state(_tag(sleeper.pid), key="another")  # stale, nobody uses it: replaced
    folder.write(old)
    read_end, write_end = os.pipe()  # this command's stdin: the keeper must not hold it
    saved = os.dup(0)
    os.dup2(read_end, 0)
    try:
        lease = acquire(env, 12.5, cache=tmp_path / "cache")
    finally:
        os.dup2(saved, 0)
        for fd in (saved, read_end, write_end):
            os.close(fd)
    assert lease is not None and lease.started_it
    try:
        assert not running(old.keeper)  # the old keeper was stopped
        assert until(stand_in.exists, 30) and until(lambda: stand_in.read_text() != "", 30)
        record = json.loads(stand_in.read_text())
        state = lease.state
        assert folder.read() == state and state.keeper.pid == record["pid"]
        assert state.key == server_key(server_environment(env)) and state.keep_s == 12.5
        assert record["argv"] == ["-m", "flows.console.kept_api", str(folder.root),
                                  record["argv"][3], "12.5"]
        assert record["auth"] == state.auth_string and len(state.auth_string) == 43
        assert state.auth_string not in " ".join(record["argv"])
        assert record["fd_listens"] and record["sid"] == record["pid"]
        assert record["stdin"] == "/dev/null" and state.keeper.what == "tpurl kept API keeper"
        assert (folder.root / "last-used").exists()
        assert _mode(folder.root / "keeper.log") == 0o600
        assert until(lambda: (folder.root / "keeper.log").read_text()
                     == "keeper output\nkeeper error\n", 30)
        with socket.create_connection(("127.0.0.1", state.port), timeout=5):
            pass  # the keeper holds the listening socket; this command's copy is closed
        assert [u.pid for u in folder.users()] == [os.getpid()]
        assert acquire(env, 12.5, cache=tmp_path / "cache").state == state  # type: ignore[union-attr]
    finally:
        stop_keeper(lease.state.keeper)
    assert not running(lease.state.keeper)


def test_status_and_stop_name_each_kept_server(tmp_path: Path,
                                               sleeper: subprocess.Popen[bytes]) -> None:
    cache = tmp_path / "cache"
    assert kept_servers(cache) == [] and status_lines(cache) == [
        "no kept Prefect API server is running"]
    assert stop_all(cache) == ["no kept Prefect API server is running"]
    live = StateDir(cache / "api-server" / "live")
    live.make()
    keeper = _tag(sleeper.pid)
    live.write(_state(keeper, port=4242, keep_s=900))
    dead = StateDir(cache / "api-server" / "dead")
    dead.make()
    gone = subprocess.Popen(["true"])
    gone.wait()
    dead.write(_state(_tag(gone.pid), port=4343))
    (cache / "api-server" / "stray-file").write_text("")
    assert [(f.root.name, s.port) for f, s in kept_servers(cache)] == [("live", 4242)]
    assert status_lines(cache)[0].startswith(  # no last use yet: idle since the start
        f"http://127.0.0.1:4242/api (keeper pid {sleeper.pid}; idle ")
    live.touch()
    os.utime(live.root / "last-used", (keeper.started_at + 5, keeper.started_at + 5))
    assert status_lines(cache, now=keeper.started_at + 15) == [
        f"http://127.0.0.1:4242/api (keeper pid {sleeper.pid}; idle 10 s, stops after 900 s "
        "idle)"]
    live.register(os.getpid())
    assert status_lines(cache, now=keeper.started_at + 15) == [
        f"http://127.0.0.1:4242/api (keeper pid {sleeper.pid}; in use by 1 command(s))"]
    assert stop_all(cache) == ["stopped the kept Prefect API server at http://127.0.0.1:4242/api"]
    assert not running(keeper)
    assert live.read() is None and dead.read() is None  # the dead one's port is no longer ours


def test_a_dead_keeper_is_replaced_even_while_commands_are_registered(
        tmp_path: Path, stand_in: Path) -> None:
    env = _acquire_env(tmp_path)
    folder = StateDir.for_database(server_environment(env), tmp_path / "cache")
    folder.make()
    gone = subprocess.Popen(["true"])
    gone.wait()
    folder.write(_state(_tag(gone.pid), key=server_key(server_environment(env))))
    folder.register(os.getpid())  # a command still registered with the dead server
    lease = acquire(env, 1, cache=tmp_path / "cache")
    try:
        assert lease is not None and lease.started_it is True
        assert lease.state.keeper.pid != gone.pid
    finally:
        assert lease is not None
        stop_keeper(lease.state.keeper)
