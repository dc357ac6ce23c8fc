"""Where a CI run's CPU goes, by kind of process: `record` samples every process's CPU
(user + system from /proc) every 2 s until SIGTERM or SIGINT; `report` sums the samples by
kind (Prefect servers, pytest runners, the MaxText programs, dockerd, ...).

Why: scripts/test.sh prints each lane's CPU and pytest each module's, but neither counts
what no test waits for (servers, dockerd, a worker's flow runs), and on two saturated cores
only less CPU shortens a run. The test servers' share in decision 0018 was measured with it:

    python3 scripts/cpu_by_process.py record /tmp/cpu.json &   # then: CI=true bash .ci/run
    kill %1; python3 scripts/cpu_by_process.py report /tmp/cpu.json --until 940

A process that lives under 2 s is missed or cut short; the sampler itself is reported. A
process already alive at the first sample (the kernel's threads, the machine's init, a
server started before) counts only the CPU it spends after it: /proc gives its total since
it started, hours of a long-lived machine thread.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

Record = dict[str, Any]
KINDS: tuple[tuple[str, str], ...] = (  # (pattern in the command line, kind): first match
    ("cpu_by_process.py", "this sampler"),
    (r"-m pytest|coverage run", "pytest runner"),
    (r"images/rehearsal/(\S+)", "MaxText program: {0}"),
    (r"uvicorn .*create_app|prefect server start", "Prefect server"),
    (r"prefect worker", "Prefect worker"),
    (r"bin/prefect ", "prefect CLI"),
    (r"bin/tpurl ", "tpurl CLI"),
    (r"mlflow", "MLflow"),
    (r"dockerd|containerd", "dockerd"),
    (r"\bpip\b|/uv ", "installers"),
    (r"chrom", "Chromium"),
)


def kind_of(command: str, comm: str) -> str:
    """The kind a process's command line names (its kernel name when it has none)."""
    for pattern, kind in KINDS:
        if found := re.search(pattern, command):
            return kind.format(*found.groups())
    return f"other: {(command.split() or [comm])[0].rsplit('/', 1)[-1]}"


def totals(records: list[Record], since: float = 0.0, until: float = float("inf")
           ) -> list[tuple[str, float, int]]:
    """CPU seconds and process count per kind, of the processes first seen in the window,
    the largest first."""
    cpu: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    for record in records:
        if since <= record["first"] < until:
            kind = kind_of(record["cmd"], record["comm"])
            cpu[kind] += record["cpu"]
            count[kind] += 1
    return sorted(((k, cpu[k], count[k]) for k in cpu), key=lambda row: -row[1])


def _sample(seen: dict[str, Record], began: float, ticks: float, first: bool = False) -> None:
    """Each process's CPU since it was first seen: since it started, or for one alive at the
    ``first`` sample, since that sample."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            fields = stat[stat.rfind(")") + 2:].split()
            key = f"{entry}:{fields[19]}"  # pid and start time: a reused pid is another
            if key not in seen:
                command = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ")
                seen[key] = {"pid": int(entry), "comm": stat[stat.find("(") + 1:stat.rfind(")")],
                             "cmd": command.decode(errors="replace")[:400],
                             "first": time.monotonic() - began,
                             "before": (int(fields[11]) + int(fields[12])) / ticks if first
                             else 0.0}
        except (OSError, IndexError):
            continue
        seen[key]["cpu"] = (int(fields[11]) + int(fields[12])) / ticks - seen[key]["before"]


def record(out: Path, every_s: float = 2.0, write_every_s: float = 30.0) -> None:
    """Samples until SIGTERM or SIGINT, then writes ``out``; meanwhile every
    ``write_every_s`` too, so a recorder killed outright still leaves most of the run."""
    seen: dict[str, Record] = {}
    stopping: list[int] = []
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda number, frame: stopping.append(number))
    began, ticks = time.monotonic(), os.sysconf("SC_CLK_TCK")
    _sample(seen, began, ticks, first=True)
    out.write_text(json.dumps(list(seen.values())))  # the baseline: a reader may start now
    written = time.monotonic()
    while not stopping:
        time.sleep(every_s)
        _sample(seen, began, ticks)
        if time.monotonic() - written >= write_every_s:
            out.write_text(json.dumps(list(seen.values())))
            written = time.monotonic()
    _sample(seen, began, ticks)  # the processes still alive at the stop, to their last tick
    out.write_text(json.dumps(list(seen.values())))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("record").add_argument("out", type=Path)
    report = sub.add_parser("report")
    report.add_argument("file", type=Path)
    report.add_argument("--since", type=float, default=0.0, help="seconds into the recording")
    report.add_argument("--until", type=float, default=float("inf"))
    args = parser.parse_args()
    if args.command == "record":
        record(args.out)
        return
    rows = totals(json.loads(args.file.read_text()), args.since, args.until)
    print(f"{sum(cpu for _, cpu, _ in rows):.0f} CPU-s sampled")
    for kind, cpu, count in rows[:25]:
        print(f"{cpu:8.0f} CPU-s {count:5d} processes  {kind}")


if __name__ == "__main__":
    main()
