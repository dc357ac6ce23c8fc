"""Inside fresh namespaces, build a root that holds only what a recipe check needs, leave
every privilege behind, and exec the check. Run as a program (``python -I sandbox_child.py
SPEC``) by ``unshare`` (flows/core/recipe_sandbox.py), never imported by the tool.

Why a root of its own rather than a list of what to hide: a team's files may read anything
the account can (another team's recipe under the same checkout, a credentials file under a
home that is not ``$HOME``, a socket under /run), and no list of places to hide would be
complete. So the check sees a tmpfs holding: the system's programs and libraries (/usr,
/bin, /sbin, /lib*, /etc) and the interpreter's own installation and venv, each bound
read-only; /dev's null, zero, random and urandom; a /proc of its own process namespace (the
tool and its parents are not in it); a copy of the recipe's files and of the probe, each at
its own path so the messages name them as the team wrote them; an empty writable home and
/tmp. Nothing of the old root stays reachable (``pivot_root``, then the old one detached).

Then the privileges: as root (another uid available) the check runs as ``nobody``; in a user
namespace (the tool not root) it stays the namespace's root with every capability dropped,
bounding set included, so it can neither undo a mount nor regain one on exec. Either way
``no_new_privs`` is set, the environment is the spec's alone and no descriptor beyond
stdin, stdout and stderr is open.

Output: one line ``TPURL-SANDBOX-READY`` just before the exec (after it, whatever is printed
is the check's); a step that fails prints ``TPURL-SANDBOX-FAILED {"step": ..., "error": ...}``
and exits 125, so the tool can tell a machine that cannot isolate from a recipe that fails.
Standard library only: it runs under the interpreter that runs the check.
"""

from __future__ import annotations

import ctypes
import json
import os
import platform
import sys
from collections.abc import Iterable

# read by flows/core/recipe_sandbox.py (which cannot be imported from here: -I, no flows)
READY_MARK = "TPURL-SANDBOX-READY"
FAILED_MARK = "TPURL-SANDBOX-FAILED"
FAILED_EXIT = 125
HOME = "/home/recipe"
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
DEVICES = ("null", "zero", "random", "urandom")
TMPFS_SIZE = "size=256m"  # what a recipe may write at import (memory, not disk)

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_NOATIME, MS_NODIRATIME, MS_BIND = 32, 1024, 2048, 4096
MS_REC, MS_PRIVATE, MS_RELATIME = 16384, 1 << 18, 1 << 21
MNT_DETACH = 2
PR_SET_NO_NEW_PRIVS, PR_CAPBSET_DROP, PR_CAP_AMBIENT = 38, 24, 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
LINUX_CAPABILITY_VERSION_3 = 0x20080522
# pivot_root has no libc wrapper: its syscall number per architecture
PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41}
# what a bind mount keeps of its source's flags (statvfs's ST_*) when remounted read-only:
# in a user namespace a remount that drops one of them is refused
_KEPT_FLAGS = ((os.ST_NOSUID, MS_NOSUID), (os.ST_NODEV, MS_NODEV), (os.ST_NOEXEC, MS_NOEXEC),
               (os.ST_NOATIME, MS_NOATIME), (os.ST_NODIRATIME, MS_NODIRATIME),
               (os.ST_RELATIME, MS_RELATIME))

_libc = ctypes.CDLL(None, use_errno=True)


class StepFailed(Exception):
    """A step of the setup failed: the message names the step and the system's error."""


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise StepFailed(f"{what}: {os.strerror(errno)}")


def _encode(text: str | None) -> bytes | None:
    return text.encode() if text is not None else None


def _mount(source: str | None, target: str, fstype: str | None, flags: int,
           data: str | None = None) -> None:
    encode = _encode
    _check(_libc.mount(encode(source), encode(target), encode(fstype), ctypes.c_ulong(flags),
                       encode(data)), f"mount {source or fstype} on {target}")


def _bind(source: str, target: str, read_only: bool = True) -> None:
    _mount(source, target, None, MS_BIND | MS_REC)
    kept = os.statvfs(source).f_flag
    flags = MS_BIND | MS_REMOUNT | MS_NOSUID | (MS_RDONLY if read_only else 0)
    flags |= sum(ms for st, ms in _KEPT_FLAGS if kept & st)
    _mount(None, target, None, flags)


def _links_along(path: str, depth: int = 0) -> list[tuple[str, str]]:
    """Every symlink met while resolving ``path`` (where it is, what it holds), so the new
    root resolves the same path to the same place."""
    found: list[tuple[str, str]] = []
    current = "/"
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            current = os.path.dirname(current)
            continue
        candidate = os.path.join(current, part)
        if os.path.islink(candidate) and depth < 40:
            target = os.readlink(candidate)
            found.append((candidate, target))
            found += _links_along(os.path.join(current, target), depth + 1)
            current = os.path.realpath(candidate)
        else:
            current = candidate
    return found


def _outermost(paths: Iterable[str]) -> list[str]:
    """The paths with none below another of them (a bind covers what is under it)."""
    kept: list[str] = []
    for path in sorted(set(paths)):
        if not any(path == k or path.startswith(k.rstrip("/") + "/") for k in kept):
            kept.append(path)
    return kept


def _under(path: str, dirs: Iterable[str]) -> bool:
    return any(path == d or path.startswith(d.rstrip("/") + "/") for d in dirs)


def interpreter_paths(executable: str) -> tuple[list[str], list[tuple[str, str]]]:
    """The directories this interpreter reads (its installation, its venv, its import path)
    as real paths, and the symlinks on the way to them and to ``executable``."""
    wanted = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
              *(p for p in sys.path if p and os.path.isdir(p))]
    links = [link for path in (*wanted, executable) for link in _links_along(path)]
    return [os.path.realpath(p) for p in wanted], links


def _system_paths() -> tuple[list[str], list[tuple[str, str]]]:
    dirs, links = [], []
    for path in SYSTEM_DIRS:
        if os.path.islink(path):
            links.append((path, os.readlink(path)))
        elif os.path.isdir(path):
            dirs.append(path)
    return dirs, links


def _makedirs(path: str, mode: int = 0o755) -> None:
    os.makedirs(path, mode=mode, exist_ok=True)
    os.chmod(path, mode)  # the umask does not decide who can enter


def build_root(root: str, copies: dict[str, bytes], executable: str, owner: int) -> None:
    """The new root's tree at ``root`` (a fresh tmpfs); ``owner`` gets the home."""
    _mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing of this propagates out
    _mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, f"mode=0755,{TMPFS_SIZE}")
    system_dirs, system_links = _system_paths()
    interpreter_dirs, interpreter_links = interpreter_paths(executable)
    binds = _outermost([*system_dirs, *interpreter_dirs])
    for path in binds:
        _makedirs(root + path)
        _bind(path, root + path)
    for link, target in [*system_links, *interpreter_links]:
        if _under(link, binds) or os.path.lexists(root + link):
            continue  # already inside a bound tree
        _makedirs(root + os.path.dirname(link))
        os.symlink(target, root + link)
    _makedirs(root + "/dev")
    for name in DEVICES:
        open(f"{root}/dev/{name}", "w").close()
        _bind(f"/dev/{name}", f"{root}/dev/{name}", read_only=False)
    for path in ("/dev/shm", "/tmp"):
        _makedirs(root + path, 0o1777)
    _makedirs(root + "/proc")
    _mount("proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    _bind(root + "/proc/sys", root + "/proc/sys")  # the kernel's settings: read, never set
    for path, data in copies.items():
        if _under(path, binds):
            continue  # the check sees it where it is, read-only
        _makedirs(root + os.path.dirname(path))
        with open(root + path, "wb") as handle:
            handle.write(data)
        os.chmod(root + path, 0o444)
    _makedirs(root + HOME, 0o700)
    os.chown(root + HOME, owner, owner)


def enter_root(root: str) -> None:
    """Make ``root`` the root, the old one detached (pivot_root(2)'s ``"."``, ``"."``)."""
    number = PIVOT_ROOT.get(platform.machine())
    if number is None:
        raise StepFailed(f"pivot_root: no syscall number known for {platform.machine()}")
    os.chdir(root)
    _check(_libc.syscall(ctypes.c_long(number), b".", b"."), "pivot_root")
    _check(_libc.umount2(b".", MNT_DETACH), "detach the old root")
    os.chdir("/")


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


def drop_privileges(uid: int | None, gid: int | None) -> None:
    """``uid``: become it (root's capabilities go with root); None: keep the user namespace's
    root but drop every capability, the bounding set's too, so an exec regains none."""
    if uid is not None and gid is not None:
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
    else:
        for cap in range(64):
            if _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
                break  # past the kernel's last capability
        _libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
        header = _CapHeader(LINUX_CAPABILITY_VERSION_3, 0)
        data = (_CapData * 2)()
        _check(_libc.capset(ctypes.byref(header), ctypes.byref(data)), "drop capabilities")
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "set no_new_privs")


def main(argv: list[str]) -> int:
    spec = json.loads(argv[1])
    root, command = str(spec["root"]), [str(a) for a in spec["command"]]
    uid, gid = spec.get("uid"), spec.get("gid")
    env = {str(k): str(v) for k, v in spec["env"].items()}
    step = "read the files to copy"
    try:
        copies = {}
        for path in spec["copies"]:
            with open(path, "rb") as handle:
                copies[os.path.abspath(path)] = handle.read()
        step = "build the root"
        build_root(root, copies, command[0], uid if uid is not None else 0)
        step = "enter the root"
        enter_root(root)
        step = "drop privileges"
        drop_privileges(uid, gid)
        os.chdir(HOME)
        if not os.access(command[0], os.X_OK):
            raise StepFailed(f"uid {os.getuid()} cannot run {command[0]}: give others read "
                             "and search permission on its venv and installation (chmod -R "
                             "o+rX), as uv and venv make them")
    except (OSError, StepFailed) as exc:
        print(f"{FAILED_MARK} " + json.dumps({"step": step, "error": str(exc)}), flush=True)
        return FAILED_EXIT
    print(READY_MARK, flush=True)
    os.closerange(3, 65536)
    os.execve(command[0], command, {**env, "HOME": HOME})
    return FAILED_EXIT  # not reached: execve replaces this process or raises


if __name__ == "__main__":
    sys.exit(main(sys.argv))
