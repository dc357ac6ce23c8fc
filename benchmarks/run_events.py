"""A run's events by category, to keep the pipeline's own events easy to find.

Usage (from the repository root):
  python -m benchmarks.run_events API_URL FLOW_RUN_ID      an existing run's events
  python -m benchmarks.run_events --run TRAIN_S [--heartbeat S]
  python -m benchmarks.run_events --quick [--api URL]  --run 1, events read after 8 s
      (--api: a running Prefect API in place of a new server, as the tests' quick run)
      starts a real `prefect server start`, runs the real flow once with stand-in stages
      (tests/support/standin_run.py: instant, train lasting TRAIN_S) in a process whose
      PREFECT_FLOWS_HEARTBEAT_FREQUENCY is S (default: the product's, 3600; Prefect's own
      default is 180), then counts that run's events.

What counts as the run's (tests/support/run_events.py): its flow and task runs' events, its
artifacts', its lock's. Prints the count per category and the share of bookkeeping (artifact
collections, lock, heartbeats); the goal is under a quarter (held by
tests/e2e/test_prefect_deploy.py on a deployment's rehearsal run). Prints figures only.

Measured (2-core machine, --run with stand-ins: 30 pipeline and run-state events a run):
Prefect's 180 s heartbeat and a 600 s lock beat: 17 % at 100 s of training, 25 % at 600 s
(4 heartbeats, 2 lock writes + 1 beat); the hourly heartbeat and lock beat
(flows/flow_runs/heartbeat.py, flows/locking/lock_rules.py): 17 % at 100 s and at 600 s.
Time-driven bookkeeping: 3600/H + 3600/L events an hour (H the heartbeat, L the lock's
leased beat): 26 an hour with 180 s and 600 s, 2 with the hourly beats; per run a constant B
(keyed artifacts, lock record, the first heartbeat). With P a run's other events the share is
under a quarter while 3 * (B + 2 * hours) < P: these stand-in runs (B 6, P 30) for 2 h, where 180 s and 600 s
crossed it after 10 min.
Exits 1 when the run's events lack its own (a `tpurl.` event and its flow run's Completed):
then what is counted is no longer the run's.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from flows.flow_runs.heartbeat import HEARTBEAT_S, SETTING
from flows.locking.lock_rules import LEASED_BEAT_S
from tests.support.run_events import BOOKKEEPING, bookkeeping_share, category, run_events


def report(api: str, run_id: str) -> bool:
    """Prints the figures; whether the run's own events were among them."""
    events = run_events(api, run_id)
    share, counts = bookkeeping_share(events)
    noise = sum(counts[c] for c in BOOKKEEPING)
    print(f"{len(events)} events; bookkeeping {noise} ({100 * share:.0f} %)")
    for name, count in counts.most_common():
        print(f"  {name}: {count}")
    names = Counter(e["event"] for e in events if category(e) in BOOKKEEPING)
    for name, count in names.most_common():
        print(f"    {name}: {count}")
    return _ended(events)


def _ended(events: list[dict]) -> bool:
    """Whether a run's events hold its own: a `tpurl.` event and its flow run's Completed."""
    names = {e["event"] for e in events}
    return any(n.startswith("tpurl.") for n in names) and "prefect.flow-run.Completed" in names


def simulate(train_s: float, heartbeat: str, settle_s: float = 35.0,
             api: str | None = None) -> bool:
    from flows.common.paths import REPO_ROOT
    from tests.support.prefect_server import server_at_or_in

    with tempfile.TemporaryDirectory() as home, server_at_or_in(api, Path(home)) as server:
        env = {**server.env, "PYTHONPATH": str(REPO_ROOT)}
        env[SETTING] = heartbeat
        started = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "tests.support.standin_run",
                               str(Path(home) / "root"), str(train_s)], cwd=REPO_ROOT,
                              env=env, text=True, capture_output=True, check=False)
        if done.returncode != 0:
            raise SystemExit(done.stdout[-2000:] + done.stderr[-3000:])
        run_id = done.stdout.strip().splitlines()[-1]
        print(f"flow run {run_id}: train {train_s:.0f} s, whole run "
              f"{time.monotonic() - started:.0f} s, {SETTING}={heartbeat}, lock beat "
              f"{LEASED_BEAT_S:.0f} s")
        # run_events reads up to 30 s past the run's end; the server records events
        # asynchronously, so at least until the run's Completed is among them
        deadline = time.monotonic() + max(settle_s, 60.0)
        time.sleep(settle_s)
        state = server.api("GET", f"/flow_runs/{run_id}").json()["state"]
        if state["type"] != "COMPLETED":
            print(f"the run ended {state['name']}: {(state.get('message') or '')[:2000]}")
            return False
        while not _ended(run_events(server.url, run_id)) and time.monotonic() < deadline:
            time.sleep(2)
        return report(server.url, run_id)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("where", nargs="*", help="API_URL FLOW_RUN_ID of an existing run")
    parser.add_argument("--run", type=float, help="run the flow once, train lasting this")
    parser.add_argument("--heartbeat", default=str(HEARTBEAT_S),
                        help="PREFECT_FLOWS_HEARTBEAT_FREQUENCY of that run")
    parser.add_argument("--quick", action="store_true",
                        help="--run 1, the events read 8 s after the run (the tests' run)")
    parser.add_argument("--api", help="with --run: a running Prefect API, not a new server")
    args = parser.parse_args()
    if args.quick:
        found = simulate(1.0, args.heartbeat, settle_s=8.0, api=args.api)
    elif args.run is not None:
        found = simulate(args.run, args.heartbeat, api=args.api)
    elif len(args.where) == 2:
        found = report(args.where[0].rstrip("/"), args.where[1])
    else:
        parser.error("give API_URL FLOW_RUN_ID, or --run TRAIN_S")
    if not found:
        print("the run's own events (tpurl.*, its flow run's Completed) were not found")
    return 0 if found else 1


if __name__ == "__main__":
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    raise SystemExit(main())
