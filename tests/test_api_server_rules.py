"""tpurl's own Prefect API server (flows/console/api_server.py) without Prefect's server: the
auth string, the socket, the environments and the launch, cheaply. The launch is checked
through a stand-in interpreter (``sys.executable`` for the test's length) that records how
it was started and, when asked, answers ``/api/health`` on the socket it was handed; the real
server's attacks are tests/test_api_access.py's."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import string
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from flows.console import api_server
from flows.console.api_server import (
    CLIENT_AUTH_ENV,
    CORS_ENV,
    PREFECT_SERVER_ENV,
    SERVER_AUTH_ENV,
    SERVER_ENV,
    ApiServer,
    client_environment,
    listening_socket,
    new_auth_string,
    server_environment,
)
from tests.support.polling import until

# Records argv, the auth and CORS settings it got, its session and its open descriptors;
# then, per its mode, answers GET /api/health on the handed socket, exits 3, or sleeps.
STAND_IN = r'''#!{python}
import ctypes, http.server, json, os, socket, sys, time
pdeathsig = ctypes.c_int(0)
ctypes.CDLL(None).prctl(2, ctypes.byref(pdeathsig), 0, 0, 0)  # PR_GET_PDEATHSIG
argv = sys.argv[1:]
fd = int(argv[argv.index("--fd") + 1])
record = {{"argv": argv, "auth": os.environ.get("{server_auth}"),
          "client_auth": os.environ.get("{client_auth}"), "cors": os.environ.get("{cors}"),
          "ui": os.environ.get("PREFECT_UI_ENABLED"), "tag": os.environ.get("STAND_IN_TAG"),
          "blocks": os.environ.get("PREFECT_API_BLOCKS_REGISTER_ON_START"),
          "extra": os.environ.get("STAND_IN_EXTRA"), "pdeathsig": pdeathsig.value,
          "sid": os.getsid(0), "pid": os.getpid(),
          "fd_open": os.path.exists(f"/proc/self/fd/{{fd}}")}}
with open(os.environ["STAND_IN_RECORD"], "w") as out:
    json.dump(record, out)
print("stand-in output", flush=True)
print("stand-in error", file=sys.stderr, flush=True)
mode = os.environ["STAND_IN_MODE"]
if mode == "exit":
    sys.exit(3)
if mode == "sleep":
    time.sleep(60)
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/api/health" else 404)
        self.end_headers()
    def log_message(self, *args):
        pass
server = http.server.HTTPServer(("127.0.0.1", 0), Health, bind_and_activate=False)
server.socket = socket.socket(fileno=fd)
server.serve_forever()
'''


@pytest.fixture
def stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The stand-in as this process's interpreter; its record's path is returned."""
    script = tmp_path / "python"
    script.write_text(STAND_IN.format(python=sys.executable, server_auth=SERVER_AUTH_ENV,
                                      client_auth=CLIENT_AUTH_ENV, cors=CORS_ENV))
    script.chmod(0o755)
    record = tmp_path / "record.json"
    monkeypatch.setenv("STAND_IN_RECORD", str(record))
    monkeypatch.setenv("TPURL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv(CLIENT_AUTH_ENV, "the-cli-s-own")  # a client setting: never the server's
    monkeypatch.setattr(sys, "executable", str(script))
    yield record


def _launched(monkeypatch: pytest.MonkeyPatch, mode: str, **given: object) -> ApiServer:
    monkeypatch.setenv("STAND_IN_MODE", mode)
    return ApiServer(**given)  # type: ignore[arg-type]


def test_the_auth_string_is_256_random_bits_fit_for_a_header() -> None:
    strings = {new_auth_string() for _ in range(20)}
    assert len(strings) == 20
    alphabet = set(string.ascii_letters + string.digits + "-_")
    assert all(len(s) == 43 and set(s) <= alphabet for s in strings)  # 32 bytes, base64url


def test_the_socket_listens_on_loopback_at_a_port_the_kernel_picked() -> None:
    with listening_socket() as sock:
        host, port = sock.getsockname()
        assert host == "127.0.0.1" and port > 0
        assert sock.family == socket.AF_INET and sock.type == socket.SOCK_STREAM
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass  # it already listens: a connection is queued before anyone accepts


def test_a_client_gets_the_url_and_the_auth_string() -> None:
    assert client_environment("http://127.0.0.1:1/api", "s3cret") == {
        "PREFECT_API_URL": "http://127.0.0.1:1/api", "PREFECT_API_AUTH_STRING": "s3cret"}


def test_the_server_gets_no_client_setting_nor_an_auth_string_it_did_not_choose() -> None:
    environ = {"PATH": "/bin", "PREFECT_API_URL": "http://elsewhere/api", CLIENT_AUTH_ENV: "c",
               SERVER_AUTH_ENV: "old", CORS_ENV: "*", "PREFECT_UI_ENABLED": "1"}
    env = server_environment(environ)
    assert env["PATH"] == "/bin"
    assert {k: env[k] for k in PREFECT_SERVER_ENV} == PREFECT_SERVER_ENV  # over the caller's
    assert {k: env[k] for k in SERVER_ENV} == SERVER_ENV
    for gone in ("PREFECT_API_URL", CLIENT_AUTH_ENV, SERVER_AUTH_ENV, CORS_ENV):
        assert gone not in env
    assert environ[CLIENT_AUTH_ENV] == "c"  # the caller's mapping is left alone
    own = server_environment({}, {"X": "1"})
    assert own["X"] == "1" and not set(SERVER_ENV) & set(own)
    assert not set(SERVER_ENV) & set(server_environment({}, {}))


def test_the_prefect_settings_set_in_this_process_reach_the_server_and_unset_ones_do_not(
        ) -> None:
    from prefect.settings import PREFECT_API_REQUEST_TIMEOUT, temporary_settings

    with temporary_settings({PREFECT_API_REQUEST_TIMEOUT: 123.0}):
        env = server_environment({})
    assert float(env["PREFECT_API_REQUEST_TIMEOUT"]) == 123.0
    assert "PREFECT_LOGGING_LEVEL" not in server_environment({})  # unset: not pinned


def _open_in_this_process(path: Path) -> bool:
    fds = Path("/proc/self/fd")
    return any(os.path.realpath(fds / fd) == str(path) for fd in os.listdir(fds))


def test_the_server_is_handed_the_socket_and_its_auth_by_environment_in_a_session_of_its_own(
        stand_in: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    server = _launched(monkeypatch, "health", auth_string="the-server-s")
    try:
        server.wait(30)
        record = json.loads(stand_in.read_text())
        fd = record["argv"][record["argv"].index("--fd") + 1]
        assert record["argv"] == [
            "-m", "uvicorn", "--app-dir", _prefect_parent(),
            "--factory", "prefect.server.api.server:create_app", "--fd", fd,
            "--log-level", "error", "--lifespan", "on"]
        assert record["fd_open"] and fd == str(server.socket.fileno())
        assert record["auth"] == "the-server-s" and "the-server-s" not in record["argv"]
        assert record["client_auth"] is None and record["ui"] == "0"
        assert record["blocks"] == "false"  # SERVER_ENV by default
        assert record["cors"] == f"http://127.0.0.1:{server.port}"
        assert record["sid"] == record["pid"] == server.process.pid  # no terminal's Ctrl-C
        assert record["pdeathsig"] == signal.SIGTERM  # and it dies with this process
        assert server.api_url == f"http://127.0.0.1:{server.port}/api"
        assert server.client_env == {"PREFECT_API_URL": server.api_url,
                                     CLIENT_AUTH_ENV: "the-server-s"}
        assert repr(server) == f"ApiServer({server.api_url}, pid {server.process.pid})"
        log = server.output_path
        assert log is not None and log.parent == stand_in.parent / "cache" / "logs"
        assert re.fullmatch(rf"api-server-\d{{8}}-\d{{6}}-{os.getpid()}\.log", log.name)
        assert not _open_in_this_process(log)  # the server holds the only copy
    finally:
        server.stop()
    assert server.process.returncode is not None and server.socket.fileno() == -1
    assert log.read_text() == "stand-in output\nstand-in error\n"  # both streams, no terminal


def _prefect_parent() -> str:
    import importlib.util

    spec = importlib.util.find_spec("prefect")
    assert spec is not None and spec.origin is not None
    return str(Path(spec.origin).parent.parent)


def test_without_a_log_file_the_server_writes_to_the_terminal_as_prefects_does(
        stand_in: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        capfd: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("TPURL_CACHE_DIR", str(tmp_path / "file"))  # no logs folder there
    server = _launched(monkeypatch, "exit")
    assert until(lambda: server.process.poll() is not None, 30)  # gone before any health check
    assert server.output_path is None
    with pytest.raises(RuntimeError) as exited:
        server.wait(30)
    assert str(exited.value) == ("tpurl's Prefect API server exited with code 3 before it "
                                 "was healthy")  # no log to name
    server.stop()
    out, err = capfd.readouterr()
    assert "stand-in output" in out and "stand-in error" in err


def test_a_server_needs_prefect_installed(stand_in: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(AssertionError) as missing:
        _launched(monkeypatch, "exit")
    assert str(missing.value) == "prefect is not installed"


def test_a_server_of_its_own_gets_a_new_socket_and_a_new_auth_string(
        stand_in: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = _launched(monkeypatch, "health", extra_env={"STAND_IN_EXTRA": "1"})
    try:
        first.wait(30)
        record = json.loads(stand_in.read_text())
        assert record["extra"] == "1" and record["blocks"] is None  # the extra, not SERVER_ENV
    finally:
        first.stop()
    given = {name: os.environ[name] for name in ("PATH", "STAND_IN_RECORD", "STAND_IN_MODE")}
    given["STAND_IN_TAG"] = "given"  # in the given environment only
    second = _launched(monkeypatch, "health", env=given)
    try:
        assert first.port != second.port and first.auth_string != second.auth_string
        assert len(first.auth_string) == 43
        assert first.extra_env == {"STAND_IN_EXTRA": "1"} and second.extra_env == SERVER_ENV
        assert second.base_env == given and first.base_env is None
        second.wait(30)
        record = json.loads(stand_in.read_text())  # the given environment, not this process's
        assert record["ui"] == "0" and record["tag"] == "given" and record["blocks"] == "false"
    finally:
        second.stop()


def test_a_server_that_exits_before_it_is_healthy_says_its_code_and_its_log(
        stand_in: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    server = _launched(monkeypatch, "exit")
    assert until(lambda: server.process.poll() is not None, 30)  # gone before any health check
    with pytest.raises(RuntimeError) as exited:
        server.wait(30)
    assert str(exited.value) == (f"tpurl's Prefect API server exited with code 3 before it "
                                 f"was healthy (the server's output: {server.output_path})")
    server.stop()


def test_a_server_that_never_answers_is_stopped_and_the_fix_names_the_setting(
        stand_in: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    server = _launched(monkeypatch, "sleep")
    with pytest.raises(RuntimeError) as late:
        server.wait(1)
    assert str(late.value) == (
        f"tpurl's Prefect API server was not healthy within 1 s (the server's output: "
        f"{server.output_path}); set PREFECT_API_URL to a running server (`prefect server "
        "start`) to use that instead")
    assert server.process.returncode == -signal.SIGTERM and server.socket.fileno() == -1


def test_the_log_is_appended_to_and_none_where_it_cannot_be_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "server.log"
    log.write_bytes(b"before\n")
    with api_server._open_output(log) as out:
        out.write(b"after\n")
    assert log.read_bytes() == b"before\nafter\n"
    assert api_server._open_output(None) is None
    assert api_server._open_output(tmp_path) is None  # a directory
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("TPURL_CACHE_DIR", str(tmp_path / "file"))  # no logs folder there
    assert api_server._output_path() is None
    monkeypatch.setenv("TPURL_CACHE_DIR", str(tmp_path / "cache"))
    path = api_server._output_path()
    assert path is not None and path.parent.is_dir()
    assert api_server._output_path() is not None  # the folder exists now: still a path
