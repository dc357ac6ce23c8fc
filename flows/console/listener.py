"""Whose socket listens on a local port: the proof a `tpurl` command asks for before it sends
anything to a kept API server it did not start (flows/console/kept_api.py).

A state file names the port, but a port is only a number: if the keeper is gone, or was
never the one listening, another local user's process may answer there and would receive
the auth string and everything the command sends. Linux says who listens: each listening
TCP socket is a line of ``/proc/net/tcp`` (``tcp6``) with its owner's uid and its inode, and
``/proc/PID/fd`` links to ``socket:[INODE]`` for every socket a process holds. The port is
the keeper's when every socket listening on it is one the recorded keeper holds, owned by
this user.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

LISTEN = "0A"  # TCP_LISTEN in include/net/tcp_states.h, as /proc/net/tcp prints it


@dataclass(frozen=True)
class Listener:
    port: int
    uid: int
    inode: int


def listeners(table: str) -> list[Listener]:
    """The listening sockets of one ``/proc/net/tcp``-format table (pure: the text in).
    Columns (net/ipv4/tcp_ipv4.c ``get_tcp4_sock``): sl, local address:port (hex), remote,
    state, queues, timer, retransmits, uid, timeout, inode."""
    found = []
    for line in table.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10 or fields[3] != LISTEN:
            continue
        port = int(fields[1].rsplit(":", 1)[1], 16)
        found.append(Listener(port=port, uid=int(fields[7]), inode=int(fields[9])))
    return found


def listening_on(port: int, proc: Path = Path("/proc")) -> list[Listener]:
    """Every socket listening on ``port``, IPv4 and IPv6, whatever its address."""
    found = []
    for name in ("tcp", "tcp6"):
        try:
            found += [entry for entry in listeners((proc / "net" / name).read_text())
                      if entry.port == port]
        except OSError:
            continue
    return found


def socket_inodes(pid: int, proc: Path = Path("/proc")) -> set[int]:
    """The inodes of the sockets ``pid`` holds (empty when it is gone or not ours to read)."""
    inodes: set[int] = set()
    try:
        entries = list((proc / str(pid) / "fd").iterdir())
    except OSError:
        return inodes
    for entry in entries:
        try:
            target = os.readlink(entry)
        except OSError:
            continue
        if target.startswith("socket:[") and target.endswith("]"):
            inodes.add(int(target[len("socket:["):-1]))
    return inodes


def ownership_problem(port: int, holder_pid: int, uid: int | None = None,
                      proc: Path = Path("/proc")) -> str | None:
    """None when the port's listener is ``holder_pid``'s own socket, owned by ``uid`` (this
    user); else what is wrong, for the message."""
    uid = os.getuid() if uid is None else uid
    found = listening_on(port, proc)
    if not found:
        return f"nothing listens on 127.0.0.1:{port}"
    held = socket_inodes(holder_pid, proc)
    for entry in found:
        if entry.uid != uid:
            return f"the socket listening on port {port} belongs to uid {entry.uid}, not {uid}"
        if entry.inode not in held:
            return (f"the socket listening on port {port} is not the one the keeper "
                    f"(pid {holder_pid}) holds")
    return None
