"""The container command: the Workload's argv, shell-quoted once, inside a small bash wrapper.

Why a wrapper: with a preamble, bash is PID 1 of the container and does not pass SIGTERM on,
so a Kueue eviction or node drain would kill MaxText after the grace period without letting it
stop cleanly. The wrapper runs preamble + program in a child, forwards TERM to it (a background child of a
non-interactive shell ignores INT, so only TERM is forwarded) and exits
with the child's status (the status the diagnosis reads). The program itself is ``exec``-ed so
the signal reaches Python, not an intermediate shell.

Secrets never appear here: the token is an env var from a Secret, read by MaxText itself.
"""

from __future__ import annotations

import shlex

from flows.core.workload import Workload

LEADER_ONLY_GUARD = (
    'if [ "${JOB_COMPLETION_INDEX:-0}" != "0" ]; then '
    'echo "host ${JOB_COMPLETION_INDEX}: only index 0 works; nothing to do"; exit 0; fi'
)


def program_script(workload: Workload) -> str:
    """Preamble lines, then the program exec-ed (argv quoted exactly once)."""
    return "\n".join([*workload.preamble, f"exec {shlex.join(workload.argv)}"])


def wrapped_script(workload: Workload, leader_only: bool = False) -> str:
    """The script bash -c runs: optional index-0 guard, then the SIGTERM-forwarding wrapper."""
    lines = [LEADER_ONLY_GUARD] if leader_only else []
    lines += [
        "_forward() { kill -s \"$1\" \"$child\" 2>/dev/null; }",
        "trap '_forward TERM' TERM",
        # not indented: a quoted argument may itself span lines
        "(",
        program_script(workload),
        ") &",
        "child=$!",
        # wait returns early (status > 128) when a trapped signal arrives: wait again for the
        # child's own exit status, which is what the pod reports. Once the child is gone, one
        # more wait returns the status bash kept for it (not the interrupted wait's 143).
        'while true; do wait "$child"; status=$?; [ "$status" -le 128 ] && break; '
        'kill -0 "$child" 2>/dev/null || { wait "$child"; status=$?; break; }; done',
        'exit "$status"',
    ]
    return "\n".join(lines)


def container_command(workload: Workload, leader_only: bool = False) -> list[str]:
    return ["/bin/bash", "-c", wrapped_script(workload, leader_only)]
