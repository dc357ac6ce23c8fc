"""Benchmark: a burst of dataset announcements for one target against a real `prefect server
start`: what the dispatching costs as the announcements pile up.

Deploys prefect.yaml's retrain-rehearsal and announce-retrain-rehearsal (`prefect deploy`, its
triggers included) on a fresh server, starts a process worker on the dispatchers' work queue,
and posts COUNT `tpurl.dataset.updated` events for the rehearsal profile, evenly over SPAN
seconds (each one POST /api/events, as `tpurl announce` does). The retrain deployment is moved
to a work queue no worker polls, so its runs wait (a retrain is not what is measured) and every
announcement after the first finds a waiting run to coalesce into. Then it waits until the
queue is settled: no dispatcher run left to start or finish and none created for QUIET_S
seconds (``--quiet-s``, default 120).

Prints: dispatcher runs (created, by final state, started as a process), retrain runs created
(the goal is one) and how they ended, the waiting run's dataset (it must be the newest), wall
time from the first post until settled, and the CPU seconds of the server, the worker and the
flow-run processes it started (read from /proc). `--save FILE` writes the figures as JSON;
`--baseline FILE` (saved on previous main, same COUNT/SPAN/LIMIT) prints each one's ratio.
The worker's `--limit` (default 4) bounds the dispatcher processes at once: without one a
process worker starts every due run in each poll, COUNT Python processes on a 2-core machine.
Exits 1 when the burst did not end as it must: more or fewer than one retrain run, the
waiting run not holding the newest dataset, or a dispatcher run that neither completed nor
was cancelled. ``--quick`` (the tests' run) posts 3 announcements over 2 s and settles after
10 quiet seconds.
Usage: .venv/bin/python -m benchmarks.announcement_burst [--count 200] [--span 60] [--limit 4]
       [--quiet-s 120] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
import uuid
from collections import Counter
from datetime import UTC, datetime
from itertools import pairwise
from pathlib import Path
from typing import Any

from flows.common.paths import REPO_ROOT
from tests.support.prefect_server import PREFECT, PrefectServer, prefect_server_in

RETRAIN, DISPATCHER = "retrain-rehearsal", "announce-retrain-rehearsal"
HELD_QUEUE = "bench-held"  # no worker polls it: retrain runs stay waiting
ANNOUNCED = REPO_ROOT / ".tpurl" / "announced"  # the rehearsal's allowed prefix
FINAL = {"COMPLETED", "FAILED", "CRASHED", "CANCELLED"}
QUIET_S = 120.0  # no new dispatcher run for this long, none unfinished: settled (the
# server turns events into dispatcher runs asynchronously: under load it lagged over a minute)
TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(root_pid: int) -> float:
    """CPU (user+system) of ``root_pid``'s process group that is alive now (a dead child's
    time is folded into its parent's cutime/cstime once reaped, which this counts too)."""
    total = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == root_pid:  # pgrp (field 5; fields[0] is field 3, the state)
            total += sum(int(f) for f in fields[11:15]) / TICK  # utime stime cutime cstime
    return total


def deploy(server: PrefectServer) -> dict[str, dict]:
    # the pool `prefect work-pool create tpurl-process --type process` creates, without the
    # CLI's import of every installed worker collection (8 CPU-s)
    server.create_pool("tpurl-process", "process")
    done = server.cli("--no-prompt", "deploy", "--name", RETRAIN, "--name", DISPATCHER)
    if done.returncode != 0:
        raise SystemExit(done.stdout[-3000:] + done.stderr[-3000:])
    found = {d["name"]: d for d in server.api("POST", "/deployments/filter", json={}).json()}
    server.api("PATCH", f"/deployments/{found[RETRAIN]['id']}",
               json={"work_queue_name": HELD_QUEUE})
    return found


def runs_of(server: PrefectServer, deployment_id: str) -> list[dict]:
    runs: list[dict] = []
    while True:  # the API pages at 200
        page = server.api("POST", "/flow_runs/filter", json={
            "flow_runs": {"deployment_id": {"any_": [deployment_id]}},
            "sort": "EXPECTED_START_TIME_ASC", "limit": 200, "offset": len(runs)}).json()
        runs += page
        if len(page) < 200:
            return runs


def post_burst(server: PrefectServer, count: int, span: float) -> list[str]:
    """COUNT announcements, evenly over SPAN seconds; the URIs in posting order."""
    uris = []
    started = time.monotonic()
    for i in range(count):
        uri = f"file://{ANNOUNCED}/burst-{i:04d}.parquet"
        server.api("POST", "/events", json=[{
            "id": str(uuid.uuid4()), "occurred": datetime.now(UTC).isoformat(),
            "event": "tpurl.dataset.updated",
            "resource": {"prefect.resource.id": "tpurl.dataset.burst", "tpurl.profile": "rehearsal"},
            "payload": {"uri": uri}}])
        uris.append(uri)
        time.sleep(max(0.0, started + span * (i + 1) / count - time.monotonic()))
    return uris


def settle(server: PrefectServer, dispatcher_id: str, count: int, timeout: float,
           quiet_s: float = QUIET_S) -> list[dict]:
    """Wait until every announcement's dispatcher run exists and ended, and no new one came
    for ``quiet_s``; the dispatcher runs then."""
    deadline, last_count, last_change = time.monotonic() + timeout, -1, time.monotonic()
    while time.monotonic() < deadline:
        runs = runs_of(server, dispatcher_id)
        if len(runs) != last_count:
            last_count, last_change = len(runs), time.monotonic()
        open_runs = [r for r in runs if r["state"]["type"] not in FINAL]
        if (not open_runs and len(runs) >= count) or (
                not open_runs and runs and time.monotonic() - last_change > quiet_s):
            return runs
        time.sleep(2)
    raise SystemExit(f"not settled after {timeout:.0f} s: {last_count} dispatcher runs")


def measure(count: int, span: float, limit: int, timeout: float,
            quiet_s: float = QUIET_S) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as home, prefect_server_in(Path(home)) as server:
        server_pid = _server_pid(Path(home))
        deployed = deploy(server)
        retrain_id, dispatcher_id = deployed[RETRAIN]["id"], deployed[DISPATCHER]["id"]
        worker_log = open(Path(home) / "worker.log", "w")  # noqa: SIM115 - closed below
        worker = subprocess.Popen([PREFECT, "worker", "start", "--pool", "tpurl-process",
                                   "--work-queue", "default", "--limit", str(limit)],
                                  cwd=REPO_ROOT, env=server.env, stdout=worker_log,
                                  stderr=subprocess.STDOUT, start_new_session=True)
        try:
            time.sleep(5)  # the worker's first poll
            server_cpu0, worker_cpu0 = cpu_seconds(server_pid), cpu_seconds(worker.pid)
            load0 = os.getloadavg()
            started = time.monotonic()
            uris = post_burst(server, count, span)
            posted = time.monotonic() - started
            dispatchers = settle(server, dispatcher_id, count, timeout, quiet_s)
            wall = time.monotonic() - started
            server_cpu = cpu_seconds(server_pid) - server_cpu0
            worker_cpu = cpu_seconds(worker.pid) - worker_cpu0
            load1 = os.getloadavg()
        finally:
            worker.terminate()
            try:
                worker.wait(timeout=30)
            except subprocess.TimeoutExpired:
                worker.kill()
            worker_log.close()
        retrains = runs_of(server, retrain_id)
    started_runs = [r for r in dispatchers if r.get("run_count", 0) > 0]  # entered Running
    odd = [f"{r['name']}: {r['state']['name']} {(r['state'].get('message') or '')[:300]}"
           for r in dispatchers if r["state"]["type"] not in {"COMPLETED", "CANCELLED"}]
    waiting = [r for r in retrains if r["state"]["type"] == "SCHEDULED"]
    created = sorted(datetime.fromisoformat(r["created"]) for r in dispatchers)
    gaps = [(b - a).total_seconds() for a, b in pairwise(created)]
    newest_held = bool(waiting) and waiting[-1]["parameters"].get("dataset_uri") == uris[-1]
    return {"announcements": count, "span s": span, "worker limit": limit,
            "posting s": posted, "settled wall s": wall,
            "dispatcher runs": len(dispatchers), "dispatcher processes": len(started_runs),
            "dispatcher runs created over s": (created[-1] - created[0]).total_seconds()
            if created else 0.0,
            "largest gap between them s": max(gaps, default=0.0),
            "dispatcher states": dict(Counter(r["state"]["name"] for r in dispatchers)),
            "retrain runs created": len(retrains),
            "retrain states": dict(Counter(r["state"]["name"] for r in retrains)),
            "waiting run holds the newest": newest_held,
            "announcements held per retrain run": [
                1 + len((r["parameters"].get("announcement") or {}).get("coalesced", []))
                for r in retrains],
            "dispatcher runs not completed or cancelled": odd,
            "server cpu s": server_cpu, "worker+dispatchers cpu s": worker_cpu,
            "load before": round(load0[0], 2), "load after": round(load1[0], 2)}


def _server_pid(home: Path) -> int:
    """The `prefect server start` process (its own session: the group of the server)."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                environ = (entry / "environ").read_bytes()
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if f"PREFECT_HOME={home}".encode() in environ and b"server\0start" in cmdline:
                return int(entry.name)
    raise SystemExit("the server process was not found")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--span", type=float, default=60.0, help="seconds the burst lasts")
    parser.add_argument("--limit", type=int, default=4, help="the worker's --limit")
    parser.add_argument("--timeout", type=float, default=3600.0)
    parser.add_argument("--save", help="write the figures to this JSON file")
    parser.add_argument("--baseline", help="JSON written by --save before: print ratios")
    parser.add_argument("--quiet-s", type=float, default=QUIET_S,
                        help="settled after this long without a new dispatcher run")
    parser.add_argument("--quick", action="store_true",
                        help="3 announcements over 2 s, settled after 10 quiet s (the tests' run)")
    args = parser.parse_args()
    if args.quick:
        args.count, args.span, args.quiet_s, args.timeout = 3, 2.0, 10.0, 600.0
    figures = measure(args.count, args.span, args.limit, args.timeout, args.quiet_s)
    if args.save:
        Path(args.save).write_text(json.dumps(figures, indent=1))
    baseline = Path(args.baseline) if args.baseline else None
    before = json.loads(baseline.read_text()) if baseline and baseline.exists() else {}
    for name, value in figures.items():
        then = before.get(name)
        ratio = (f"  (before {then:g}, ratio {value / then:.2f})"
                 if isinstance(value, int | float) and not isinstance(value, bool)
                 and isinstance(then, int | float) and then else
                 f"  (before {then})" if then is not None else "")
        shown = f"{value:.1f}" if isinstance(value, float) else str(value)
        print(f"{name:<28} {shown}{ratio}")
    print(f"goal: one retrain run created: {'met' if figures['retrain runs created'] == 1 else 'MISSED'}")
    ended_right = (figures["retrain runs created"] == 1 and figures["waiting run holds the newest"]
                   and not figures["dispatcher runs not completed or cancelled"])
    if not ended_right:
        print("the burst did not end in one waiting retrain run holding the newest dataset")
    return 0 if ended_right else 1


if __name__ == "__main__":
    raise SystemExit(main())
