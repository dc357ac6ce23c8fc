"""Benchmark: Kubernetes API traffic while a JobSet runs, and how fast its end is noticed.

Runs the real GkeBackend (default watch settings and budgets) against the fake API of
tests/fakes/kube_api over HTTP. The JobSet is admitted, starts, prints a log line every few
seconds for ``--window-s`` and then completes. Prints

    steady-state requests/minute = API requests from 15 s after start until the end,
                                   divided by that time                    (target ≤ 2/min)
    notice delay                 = time from the Completed condition being written to the
                                   backend's verdict                        (target ≤ 5 s)

The default window (330 s) covers a full server-side watch cycle (WatchSettings.timeout_s =
300 s), so the reconnects that a long run makes are counted, not just the quiet start.
Usage: .venv/bin/python benchmarks/gke_watch.py [--window-s 330] [--drop-watch-every N]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("HF_TOKEN", "hf_benchmark_token_not_a_secret")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window-s", type=float, default=330.0)
    parser.add_argument("--line-every-s", type=float, default=5.0)
    parser.add_argument("--drop-watch-every", type=int, default=None,
                        help="cut every watch stream after N events (resilience, not steady state)")
    args = parser.parse_args()

    from flows.backends.gke.backend import GkeBackend
    from flows.backends.gke.watch.client import cluster_at
    from flows.config import load_profile
    from flows.core.layout import Layout
    from flows.core.storage import LocalStorage, file_uri
    from flows.stages.programs import train_workload
    from tests.fakes.kube_api import FakeApiServer, FakeKube
    from tests.fakes.kube_api.scenarios import admit, say, scenario, start, succeed
    from tests.support.profiles import TUTORIAL, TUTORIAL_REQUIRED

    class Quiet:
        def info(self, msg: str, *a: object) -> None:
            pass

        def warning(self, msg: str, *a: object) -> None:
            print("  warning:", msg % a if a else msg)

    profile = load_profile(TUTORIAL, TUTORIAL_REQUIRED, environ={})
    lines = int(args.window_s / args.line_every_s)
    script = [(0.2, admit), (0.2, start),
              *[(args.line_every_s, say(f"step {i} loss=0.5")) for i in range(lines)],
              (0.5, succeed)]
    kube = scenario(FakeKube(), script)
    kube.drop_watch_every = args.drop_watch_every
    with FakeApiServer(kube) as server, tempfile.TemporaryDirectory() as tmp:
        backend = GkeBackend(profile, logger=Quiet(), stage="train",
                             storage=LocalStorage(), cluster=cluster_at(server.url))
        workload = train_workload(profile, Layout(profile), backend.runtime)
        print(f"running a JobSet for {args.window_s:.0f} s against the fake API ...")
        started = time.monotonic()
        backend.run_workload(workload, file_uri(Path(tmp) / "train.log"))
        ended = time.monotonic()
        succeeded_at = kube.action_times["succeed"]
        steady_from = started + 15.0
        steady = kube.requests_between(steady_from, succeeded_at)
        minutes = (succeeded_at - steady_from) / 60
        assert backend.monitor is not None and backend.monitor.noticed_at is not None
        delay = backend.monitor.noticed_at - succeeded_at
        kinds = Counter(_kind(path) for _, _, path in steady)
        print(f"total API requests: {len(kube.requests)} in {ended - started:.0f} s "
              f"(start-up: secret, create, 3 lists, 3 watches, 1 log stream)")
        print(f"steady state: {len(steady)} requests in {minutes:.1f} min = "
              f"{len(steady) / minutes:.2f} requests/minute (target <= 2) {dict(kinds)}")
        print(f"terminal condition noticed after {delay * 1000:.0f} ms (target <= 5 s); "
              f"run_workload returned {ended - succeeded_at:.2f} s after it (log drained)")


def _kind(path: str) -> str:
    base = path.split("?")[0]
    if base.endswith("/log"):
        return "log"
    return base.rstrip("/").split("/")[-1] + (" watch" if "watch=true" in path else "")


if __name__ == "__main__":
    main()
