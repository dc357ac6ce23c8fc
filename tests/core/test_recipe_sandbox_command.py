"""The sandbox's command line and the reading of its first line (flows/core/recipe_sandbox.py),
as pure functions: who the check runs as, that nothing of this process's environment is on the
command line, and that only the launcher's first line can say the sandbox was made."""

from __future__ import annotations

import json
import pwd
from pathlib import Path

from flows.core.recipe_sandbox import (
    FAILED_MARK,
    NAMESPACES,
    READY_MARK,
    sandbox_failure,
    sandbox_needs,
    sandboxed_command,
    strip_ready,
)

PYTHON = Path("/venv/bin/python")


def _command(euid: int) -> tuple[list[str], dict[str, object]]:
    command = sandboxed_command(PYTHON, ["/repo/probe.py", "--rewards", "/team/r.py"],
                                [Path("/repo/probe.py"), Path("/team/r.py")],
                                {"PATH": "/usr/bin"}, Path("/tmp/root"), euid)
    return command, json.loads(command[-1])


def test_as_root_the_check_runs_as_nobody_without_a_user_namespace() -> None:
    command, spec = _command(0)
    assert command[0] == "unshare" and "--user" not in command
    assert all(flag in command for flag in (*NAMESPACES, "--fork", "--kill-child"))
    nobody = pwd.getpwnam("nobody")
    assert (spec["uid"], spec["gid"]) == (nobody.pw_uid, nobody.pw_gid)
    assert spec["command"] == [str(PYTHON), "-I", "/repo/probe.py", "--rewards", "/team/r.py"]
    assert spec["env"] == {"PATH": "/usr/bin"}  # the whole environment it gets


def test_as_another_user_the_check_runs_in_a_user_namespace_as_its_root() -> None:
    command, spec = _command(1000)
    assert command[1:3] == ["--user", "--map-root-user"]
    assert (spec["uid"], spec["gid"]) == (None, None)  # stays, its capabilities dropped


def test_only_the_launchers_first_line_says_the_sandbox_was_made() -> None:
    assert sandbox_failure(f"{READY_MARK}\nTPURL-RECIPE-REPORT {{}}\n", "", 0) is None
    assert strip_ready(f"{READY_MARK}\nrest\n") == "rest\n"
    failed = FAILED_MARK + " " + json.dumps({"step": "build the root", "error": "mount tmpfs "
                                             "on /tmp/x: Operation not permitted"})
    assert sandbox_failure(failed + "\n", "", 125) == (
        "build the root: mount tmpfs on /tmp/x: Operation not permitted")
    assert sandbox_failure("", "unshare: unshare failed: Operation not permitted\n", 1) == (
        "unshare: unshare failed: Operation not permitted")
    # a check's output that prints the mark later cannot claim a sandbox that was not made
    assert sandbox_failure(f"something\n{READY_MARK}\n", "", 1) == "unshare exited 1 with no output"
    assert strip_ready(f"something\n{READY_MARK}\n") == f"something\n{READY_MARK}\n"


def test_what_the_sandbox_needs_is_told_to_root_and_to_other_accounts_apart() -> None:
    assert "user.max_user_namespaces" in sandbox_needs(1000)
    assert "CAP_SYS_ADMIN" in sandbox_needs(0)
