"""Only the user who runs `tpurl` can use its Prefect API server (flows/console/api_server.py,
kept_api.py, listener.py; docs/decisions/0020-private-api-access.md). Each attack is made for
real against a real server: another local user (a process run as ``nobody``,
tests/support/other_user.py) and a web page (a foreign ``Origin``, a CORS preflight) try to
read a Secret block with ``include_secrets``, create a flow run and an automation, and use
the events and logs websockets; another user takes or answers on the server's port; a plain
command must leave no process behind."""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from flows.common.paths import REPO_ROOT
from flows.console.api_server import ApiServer
from flows.console.listener import listeners, ownership_problem
from flows.core.processes import ProcessTag
from tests.support.other_user import run_as_nobody, start_as_nobody
from tests.support.polling import until
from tests.support.prefect_database import seed_home

pytestmark = [pytest.mark.services, pytest.mark.realtime]

TPURL = str(Path(sys.executable).with_name("tpurl"))
HF_TOKEN = "hf_" + "Zq7" * 12  # the Secret block's value; an attacker must never see it

# What any local account (or a page's script) can send: stdlib only, no auth string.
ATTACKS = r'''
import json, sys, urllib.error, urllib.request
url, flow_id, origin = sys.argv[1], sys.argv[2], sys.argv[3]
def ask(method, path, body=None):
    headers = {"Content-Type": "application/json"}
    if origin:
        headers["Origin"] = origin
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            status, head, text = answer.status, answer.headers, answer.read().decode()
    except urllib.error.HTTPError as error:
        status, head, text = error.code, error.headers, error.read().decode()
    return {"status": status, "allow_origin": head.get("access-control-allow-origin"),
            "body": text}
trigger = {"type": "event", "match": {}, "expect": ["tpurl.evil"], "posture": "Reactive",
           "threshold": 1, "within": 0}
print(json.dumps({
    "secrets": ask("POST", "/block_documents/filter", {"include_secrets": True}),
    "flow_run": ask("POST", "/flow_runs/", {"flow_id": flow_id}),
    "automation": ask("POST", "/automations/", {"name": "evil", "trigger": trigger,
                                                "actions": [{"type": "do-nothing"}]}),
    "health": ask("GET", "/health"),
}))
'''

# Binding the server's port, on every address that would receive 127.0.0.1's connections.
TAKE_PORT = r'''
import json, socket, sys
port, taken = int(sys.argv[1]), {}
for family, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET, "0.0.0.0"),
                     (socket.AF_INET6, "::")):
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(1)
        taken[host] = True
    except OSError:
        taken[host] = False
    finally:
        sock.close()
print(json.dumps(taken))
'''

# Another user's look at the kept server's files and the processes' environment.
PEEK = r'''
import json, os, sys
found = {}
for path in sys.argv[1:]:
    try:
        if os.path.isdir(path):
            os.listdir(path)
        else:
            open(path, "rb").read()
        found[path] = "read"
    except OSError as error:
        found[path] = type(error).__name__
print(json.dumps(found))
'''

# An impostor: answers every request with 200 and prints what it was sent.
IMPOSTOR = r'''
import http.server, json, sys
class Record(http.server.BaseHTTPRequestHandler):
    def _any(self):
        print(json.dumps({"method": self.command, "path": self.path,
                          "authorization": self.headers.get("Authorization")}), flush=True)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b"true")
    do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _any
    def log_message(self, *args):
        pass
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Record)
print(json.dumps({"port": server.server_address[1]}), flush=True)
server.serve_forever()
'''


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(token.encode()).decode()}


def _ask(url: str, method: str, path: str, body: Any = None,
         headers: dict[str, str] | None = None) -> tuple[int, Any, str]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json",
                                              **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, answer.headers, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers, error.read().decode()


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory every local user may traverse, as a home's ``~/.cache`` usually is (the
    pytest tmp_path is 0700: it would hide the files whatever their modes)."""
    path = Path(tempfile.mkdtemp(prefix="tpurl-access-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _env(root: Path, **extra: str) -> dict[str, str]:
    seed_home(root / "prefect-home")
    env = {k: v for k, v in os.environ.items()
           if k not in ("PREFECT_API_URL", "PREFECT_API_AUTH_STRING", "TPURL_KEEP_API_S")}
    env.update(TPURL_CACHE_DIR=str(root / "cache"), PREFECT_HOME=str(root / "prefect-home"),
               PYTHONPATH=str(REPO_ROOT), **extra)
    return env


def _refused(answer: dict[str, Any]) -> bool:
    return (answer["status"] == 401 and answer["allow_origin"] is None
            and HF_TOKEN not in answer["body"])


def _websocket_refuses(url: str, path: str, token: str | None) -> bool:
    """The events and logs streams: a client without the auth string is closed (1008 or
    1002) right after its auth message, before any event goes either way."""
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    with connect(url.replace("http://", "ws://") + path, subprotocols=["prefect"],
                 open_timeout=30) as ws:
        ws.send(json.dumps({"type": "auth", "token": token}))
        try:
            ws.recv(timeout=10)
        except ConnectionClosed as closed:
            return closed.rcvd is not None and closed.rcvd.code in (1002, 1008)
        except TimeoutError:
            return False  # still open: it would take events or send them
    return False


def test_the_commands_server_answers_only_its_user_and_no_web_page(
        shared_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env = _env(shared_dir)
    monkeypatch.setenv("TPURL_CACHE_DIR", env["TPURL_CACHE_DIR"])
    server = ApiServer(env=env)
    try:
        # the port is the command's from its bind on, before the server even starts
        taken = run_as_nobody(TAKE_PORT, str(server.port))
        assert taken == {"127.0.0.1": False, "0.0.0.0": False, "::": False}, taken
        server.wait(600)
        url, mine = server.api_url, _auth(server.auth_string)
        assert server.auth_string not in " ".join(
            Path(f"/proc/{server.process.pid}/cmdline").read_text().split("\0"))
        _, _, flow = _ask(url, "POST", "/flows/", {"name": "victim"}, mine)
        flow_id = json.loads(flow)["id"]
        from prefect.blocks.system import Secret
        from prefect.settings import PREFECT_API_AUTH_STRING, PREFECT_API_URL, temporary_settings

        with temporary_settings({PREFECT_API_URL: url,
                                 PREFECT_API_AUTH_STRING: server.auth_string}):
            Secret(value=HF_TOKEN).save("hf-token", overwrite=True)

        other_user = run_as_nobody(ATTACKS, url, flow_id, "")
        web_page = run_as_nobody(ATTACKS, url, flow_id, "http://evil.example")
        for who, answers in (("another user", other_user), ("a web page", web_page)):
            for what in ("secrets", "flow_run", "automation"):
                assert _refused(answers[what]), (who, what, answers[what])
            assert answers["health"]["status"] == 200  # says only "true"
        # a page's preflight gets no permission for its origin
        status, head, _ = _ask(url, "OPTIONS", "/block_documents/filter", headers={
            "Origin": "http://evil.example", "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization,content-type"})
        assert status >= 400 and head.get("access-control-allow-origin") is None
        for path in ("/events/in", "/events/out", "/logs/out"):
            assert _websocket_refuses(url, path, None), path
            assert _websocket_refuses(url, path, "a guess"), path
        # nothing was created; the user still reads the secret with the auth string. (In a
        # test session the server shares the session harness's database, whose runs and
        # automations are other tests': only the attack's own are counted.)
        victims = {"flows": {"id": {"any_": [flow_id]}}}
        assert json.loads(_ask(url, "POST", "/flow_runs/count", victims, mine)[2]) == 0
        automations = json.loads(_ask(url, "POST", "/automations/filter", {}, mine)[2])
        assert [a for a in automations if a.get("name") == "evil"] == []
        _ask(url, "POST", "/flow_runs/", {"flow_id": flow_id}, mine)  # the count counts
        assert json.loads(_ask(url, "POST", "/flow_runs/count", victims, mine)[2]) == 1
        _, _, blocks = _ask(url, "POST", "/block_documents/filter", {"include_secrets": True},
                            mine)
        assert HF_TOKEN in blocks
    finally:
        server.stop()
    assert not until(lambda: _answers(server.port), 0.5)


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return True
    except OSError:
        return False


def test_another_user_can_neither_read_the_kept_servers_state_nor_use_it(
        shared_dir: Path) -> None:
    env = _env(shared_dir)
    started = subprocess.run([TPURL, "api-server", "start"], env=env, capture_output=True,
                             text=True, timeout=900)
    try:
        assert started.returncode == 0, started.stderr
        state_file, = (shared_dir / "cache" / "api-server").glob("*/state.json")
        state = json.loads(state_file.read_text())
        keeper, token = state["keeper"]["pid"], state["auth_string"]
        url = f"http://127.0.0.1:{state['port']}/api"
        assert token not in Path(f"/proc/{keeper}/cmdline").read_text()
        peeked = run_as_nobody(PEEK, str(state_file), str(state_file.parent),
                               str(state_file.parent.parent), f"/proc/{keeper}/environ")
        assert set(peeked.values()) == {"PermissionError"}, peeked
        answers = run_as_nobody(ATTACKS, url, "00000000-0000-0000-0000-000000000000", "")
        for what in ("secrets", "flow_run", "automation"):
            assert _refused(answers[what]), (what, answers[what])
        assert run_as_nobody(TAKE_PORT, str(state["port"])) == {
            "127.0.0.1": False, "0.0.0.0": False, "::": False}
        # the user's next command uses it (asked for by `start`, no setting needed)
        probe = subprocess.run([sys.executable, "-m", "tests.support.kept_probe", "0"],
                               cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                               timeout=900)
        assert probe.returncode == 0, probe.stderr
        assert probe.stdout.strip() == url and "started" not in probe.stderr
    finally:
        subprocess.run([TPURL, "api-server", "stop"], env=env, capture_output=True, timeout=120)


def _server_key(env: dict[str, str]) -> str:
    """The key a command computes for this environment (in a process like the command's:
    the test process's own Prefect settings would change it)."""
    return subprocess.run(
        [sys.executable, "-c", "import os; from flows.console.api_server import "
         "server_environment; from flows.console.kept_api import server_key; "
         "print(server_key(server_environment(os.environ)))"],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, check=True).stdout.strip()


@pytest.mark.parametrize("impostor_user", ["nobody", "the same user"])
def test_an_impostor_on_the_recorded_port_is_refused_and_sent_nothing(
        shared_dir: Path, impostor_user: str) -> None:
    """A kept server's state names a live keeper and a port, but what answers on the port is
    not the keeper's socket: another user's server, or one of the user's own processes."""
    env = _env(shared_dir, TPURL_KEEP_API_S="600")
    impostor = (start_as_nobody(IMPOSTOR) if impostor_user == "nobody" else
                subprocess.Popen([sys.executable, "-I", "-u", "-c", IMPOSTOR],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    keeper = subprocess.Popen(["sleep", "600"])  # alive, and holds no socket
    try:
        assert impostor.stdout is not None
        port = json.loads(impostor.stdout.readline())["port"]
        state_dir = _state_dir(env)
        state_dir.mkdir(parents=True, mode=0o700)
        (state_dir / "state.json").write_text(json.dumps({
            "keeper": ProcessTag.of(keeper.pid, "tpurl kept API keeper").__dict__,
            "port": port, "key": _server_key(env), "keep_s": 600,
            "auth_string": "the-users-secret"}))
        probe = subprocess.run([sys.executable, "-m", "tests.support.kept_probe", "0"],
                               cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                               timeout=900)
        assert probe.returncode != 0
        assert "refusing the kept Prefect API server" in probe.stderr, probe.stderr
        assert "nothing was sent to it" in probe.stderr
    finally:
        impostor.terminate()
        received, _ = impostor.communicate(timeout=30)
        keeper.kill()
        keeper.wait()
    assert received.strip() == "", f"the impostor was sent: {received}"


def _state_dir(env: dict[str, str]) -> Path:
    from flows.console.kept_api import StateDir

    return StateDir.for_database(env, Path(env["TPURL_CACHE_DIR"])).root


def test_a_plain_command_leaves_no_process_behind(tmp_path: Path) -> None:
    env = _env(tmp_path)
    probe = subprocess.run([sys.executable, "-m", "tests.support.kept_probe", "0"],
                           cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert probe.returncode == 0, probe.stderr
    port = int(probe.stdout.strip().rsplit(":", 1)[1].split("/")[0])
    home = f"PREFECT_HOME={env['PREFECT_HOME']}".encode()

    def ours() -> list[int]:
        found = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    if home in (entry / "environ").read_bytes().split(b"\0"):
                        found.append(int(entry.name))
                except OSError:
                    continue
        return found

    assert until(lambda: not ours(), 30), f"left running: {ours()}"
    assert not _answers(port)
    assert not (tmp_path / "cache" / "api-server").exists()


def test_ownership_is_the_holders_socket_owned_by_this_user() -> None:
    """The proof itself, on this machine's real /proc: a socket this process listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        port = sock.getsockname()[1]
        assert ownership_problem(port, os.getpid()) is None
        child = subprocess.Popen(["sleep", "60"])  # ours, but it does not hold the socket
        try:
            assert "is not the one the keeper" in str(ownership_problem(port, child.pid))
        finally:
            child.kill()
            child.wait()
        assert "belongs to uid" in str(ownership_problem(port, os.getpid(), uid=os.getuid() + 1))
    assert "nothing listens" in str(ownership_problem(port, os.getpid()))


def test_the_listener_table_is_read_as_the_kernel_prints_it() -> None:
    """Two lines in net/ipv4/tcp_ipv4.c's format: a listener on 127.0.0.1:8080 (uid 1000)
    and an established connection, which is no listener."""
    table = (
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  "
        "timeout inode\n"
        "   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000 "
        "       0 4242 1 0000000000000000 100 0 0 10 0\n"
        "   1: 0100007F:1F90 0100007F:D431 01 00000000:00000000 00:00000000 00000000  1000 "
        "       0 4343 1 0000000000000000 20 4 30 10 -1\n")
    found = listeners(table)
    assert [(e.port, e.uid, e.inode) for e in found] == [(8080, 1000, 4242)]


def test_the_auth_string_is_redacted_wherever_it_would_be_logged() -> None:
    """The CLI puts it in its environment for its children (PREFECT_API_AUTH_STRING): a
    log line that quoted it would hand it to whoever reads the log."""
    from flows.core.redaction import redact, register_environment

    token = "tpurl-" + os.urandom(16).hex()
    register_environment({"PREFECT_API_AUTH_STRING": token})
    assert token not in redact(f"GET /api/flows Authorization: {token}")
