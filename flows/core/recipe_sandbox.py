"""The command that imports a team's recipe where it can reach nothing of the tool's: the
credentials in its environment and its parents', the files of the account, the network.

Importing runs the team's code. Run as a plain child it would read what the account can:
``/proc/<pid>/environ`` of `tpurl`, of the flow, of the worker and of the shell that started
them (HF_TOKEN, PREFECT_API_KEY), the Google credentials in the home, another team's recipe
beside its own; and it could send them anywhere. A cleared environment hides none of that.

So the probe runs under ``unshare`` (util-linux) in new network, process, mount, IPC and
UTS namespaces: no interface but a loopback that is down; a /proc where the tool and its
parents do not exist; a root of its own holding only the system's files, the interpreter's
and a copy of the recipe's (flows/core/sandbox_child.py builds it, then drops privileges).
As root the check runs as ``nobody``; as any other user it runs in a user namespace
(``--user --map-root-user``) with every capability dropped.

Where that cannot be made (not Linux, no ``unshare``, user namespaces disabled or
restricted for the account), :class:`SandboxUnavailable` says why, and the caller reads the
files instead of importing them and says so (flows/core/recipe_check.py): the team's code is
never imported outside the sandbox.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

LAUNCHER = Path(__file__).with_name("sandbox_child.py")
READY_MARK = "TPURL-SANDBOX-READY"  # printed by the launcher before it execs the check
FAILED_MARK = "TPURL-SANDBOX-FAILED"
NAMESPACES = ("--net", "--pid", "--mount", "--ipc", "--uts")
OTHER_USER = "nobody"
NOBODY_ID = 65534  # the kernel's overflow id, when the system names no `nobody`
# the check's PATH inside: the system's programs, bound read-only from the machine's
SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"
USERNS_HINT = ("Linux user namespaces for an account other than root: sysctl "
               "user.max_user_namespaces above 0 (older Debian: kernel.unprivileged_userns_clone"
               "=1; Ubuntu 23.10 and later: kernel.apparmor_restrict_unprivileged_userns=0), "
               "or `tpurl validate` on a machine that has them")


ROOT_HINT = ("namespaces, which root makes with CAP_SYS_ADMIN (a container started without "
             "it, or whose seccomp profile refuses unshare, cannot), or `tpurl validate` on a "
             "machine that can")


def sandbox_needs(euid: int) -> str:
    """What the machine must allow for the sandbox, for the account that runs tpurl."""
    return ROOT_HINT if euid == 0 else USERNS_HINT


class SandboxUnavailable(Exception):
    """This machine cannot isolate the recipe's code; the message says what failed."""


def unavailable_here() -> str | None:
    """Why no sandbox can be made on this machine at all, or None (then one is tried)."""
    if not sys.platform.startswith("linux"):
        return f"the sandbox needs Linux's namespaces; this is {sys.platform}"
    if shutil.which("unshare") is None:
        return "`unshare` (util-linux) is not on PATH"
    return None


def _other_user() -> tuple[int, int]:
    try:
        entry = pwd.getpwnam(OTHER_USER)
    except KeyError:
        return NOBODY_ID, NOBODY_ID
    return entry.pw_uid, entry.pw_gid


def sandboxed_command(python: Path, arguments: list[str], copies: Iterable[Path],
                      env: Mapping[str, str], root: Path, euid: int) -> list[str]:
    """``python -I ARGUMENTS`` run in the sandbox whose root is built on the empty directory
    ``root`` (a mount point only inside the namespaces), with ``copies`` (absolute paths)
    copied in at their own paths and ``env`` as its whole environment. ``euid`` 0: the check
    runs as ``nobody``; else in a user namespace, its capabilities dropped."""
    uid, gid = _other_user() if euid == 0 else (None, None)
    spec = {"root": str(root), "command": [str(python), "-I", *arguments],
            "copies": [str(path) for path in copies], "env": dict(env), "uid": uid, "gid": gid}
    user = () if euid == 0 else ("--user", "--map-root-user")
    return ["unshare", *user, *NAMESPACES, "--fork", "--kill-child", "--", str(python), "-I",
            str(LAUNCHER), json.dumps(spec)]


def launcher_env() -> dict[str, str]:
    """What ``unshare`` and the launcher start with: a PATH to find ``unshare``, nothing
    more (the check's own environment is in the spec)."""
    return {"PATH": os.environ.get("PATH", SANDBOX_PATH)}


def sandbox_failure(stdout: str, stderr: str, returncode: int | None) -> str | None:
    """None when the sandbox was made (the launcher said so before the check started),
    else what failed: the launcher's step, or what ``unshare`` printed."""
    first = stdout.split("\n", 1)[0]
    if first == READY_MARK:
        return None
    if first.startswith(FAILED_MARK + " "):
        try:
            failed = json.loads(first[len(FAILED_MARK) + 1:])
            return f"{failed['step']}: {failed['error']}"
        except (json.JSONDecodeError, KeyError, TypeError):
            pass
    told = stderr.strip().splitlines()
    return (told[-1] if told else f"unshare exited {returncode} with no output")[-400:]


def strip_ready(stdout: str) -> str:
    """The check's own output, the launcher's line taken off."""
    first, _, rest = stdout.partition("\n")
    return rest if first == READY_MARK else stdout
