"""Benchmark: Kubernetes API traffic while a JobSet runs, and how fast its end is noticed,
in steady state and under each fault the watch must survive.

Runs the real GkeBackend (default watch settings and budgets) against the fake API of
tests/fakes/kube_api over HTTP. The JobSet is admitted, starts, prints a log line every few
seconds and then completes. For each case it prints

    requests/minute = API requests from 15 s after start until the end, divided by that time
                      (goal <= 2/min in steady state; the fault cases show what a fault costs)
    notice delay    = time from the Completed condition being written, or from the API
                      answering again when it was failing then, to the backend's verdict
                      (goal <= 5 s, in every case); "after write" is the raw figure

Cases: steady (``--window-s``, default 330 s: a full server-side watch cycle,
WatchSettings.timeout_s = 300 s, so the reconnects of a long run are counted); then, each for
``--fault-window-s`` (default 40 s): stream-aborts (every watch stream cut after one event
while objects keep changing), watch-cuts (every open stream dropped every 2 s with no event),
503-burst (2 s before completion every stream drops and the next 20 requests get 503),
429-retry-after (the same with 10 answers of 429 and Retry-After: 2).
The races a real cluster's controllers produce, each with the default watch settings and a
failure verdict, where the notice delay runs from the write that decides the verdict to the
verdict, and "stage end" to run_workload's return (so a wait after the verdict shows):
spot-reclaim (a spot slice goes silently, PodGC deletes its pods, then the Pathways head
gives up: preempted, and the resubmission succeeds), operator-delete (kubectl delete jobset
mid-run: cancelled), worker-crash (a worker fails while the head still runs: no wait for its
log), stockout (no capacity, the autoscaler retrying after its back-off, for
``--fault-window-s`` as the scheduling budget: the cause kept).
How cost grows with the work: ``slices-1``, ``slices-4``, ``slices-16``
run the steady case with ``gke.num_slices`` N (the tutorial's 4x8 slice: 8 worker pods per
slice) for ``--slices-window-s`` (default 60 s) and print, beside requests/minute, the growth
of the flow process's resident memory during the run (the fake API runs in a process of its
own: ``_serve_fake``). Goal:
requests/minute independent of the slice count, memory flat.
Each race must end in its verdict (``RACE_VERDICTS``): the exit code is 1 when one does not,
so the quick run in the tests (short windows) catches a race that no longer measures what it
names; the timings are only printed.
``--quick`` is the tests' run: every case with the shortest windows that still reach their
verdicts (``--window-s 3 --fault-window-s 12 --slices-window-s 3 --line-every-s 1``; the
spot reclaim needs about 10 s of fault window for its second submission).
Usage: .venv/bin/python benchmarks/gke_watch.py [--window-s 330] [--fault-window-s 40]
       [--only steady,503-burst] [--slices-window-s 60] [--quick]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, ClassVar

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("HF_TOKEN", "hf_benchmark_token_not_a_secret")

CASES = ("steady", "stream-aborts", "watch-cuts", "503-burst", "429-retry-after")
RACES = ("spot-reclaim", "operator-delete", "worker-crash", "stockout")
SLICES = ("slices-1", "slices-4", "slices-16")
# What each race must end in, whatever its timing: a race that ends otherwise no longer
# measures what it names (the exit code says so; the figures are only printed).
RACE_VERDICTS = {"spot-reclaim": "succeeded after 2 submission(s)",
                 "operator-delete": "cancelled: ",
                 "worker-crash": "infrastructure: ",
                 "stockout": "infrastructure: "}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window-s", type=float, default=330.0)
    parser.add_argument("--fault-window-s", type=float, default=40.0)
    parser.add_argument("--line-every-s", type=float, default=5.0)
    parser.add_argument("--slices-window-s", type=float, default=60.0)
    parser.add_argument("--only", default=",".join(CASES + RACES + SLICES))
    parser.add_argument("--quick", action="store_true", help="the shortest windows (the tests' run)")
    args = parser.parse_args()
    if args.quick:
        args.window_s, args.fault_window_s, args.slices_window_s, args.line_every_s = 3, 12, 3, 1
    print(f"{'case':<16} {'window':>7} {'requests/min':>13} {'notice delay':>13} "
          f"{'after write':>12}  goals: <= 2/min (steady), <= 5 s")
    cases = args.only.split(",")
    wrong: list[str] = []
    if any(case in SLICES for case in cases):
        # The first backend run of the process imports and caches what later ones reuse (82
        # MiB when a slices case came first): run one unprinted, so each slice count's growth
        # is its own, whatever ran before it.
        run_case("steady", 5.0, args.line_every_s, slices=1)
    for case in cases:
        if case in RACES:
            rate, delay, end, verdict = run_race(case, args.fault_window_s)
            ok = "ok" if delay <= 5.0 else "MISSED"
            if not verdict.startswith(RACE_VERDICTS[case]):
                ok = f"WRONG VERDICT (expected {RACE_VERDICTS[case]!r})"
                wrong.append(case)
            print(f"{case:<16} {'':>7} {rate:>13.2f} {delay * 1000:>10.0f} ms "
                  f"{'stage end':>9} {end * 1000:.0f} ms  {ok}  {verdict}", flush=True)
            continue
        if case in SLICES:
            slices = int(case.split("-")[1])
            rate, delay, raw, kinds = run_case("steady", args.slices_window_s,
                                               args.line_every_s, slices=slices)
            print(f"{case:<16} {args.slices_window_s:>6.0f}s {rate:>13.2f} "
                  f"{delay * 1000:>10.0f} ms {raw * 1000:>9.0f} ms  RSS +"
                  f"{(PEAK['rss'] - PEAK['base']) / 2**20:.1f} MiB during the run (peak "
                  f"{PEAK['rss'] / 2**20:.0f} MiB)  {dict(kinds)}", flush=True)
            continue
        window = args.window_s if case == "steady" else args.fault_window_s
        rate, delay, raw, kinds = run_case(case, window, args.line_every_s)
        ok = ("ok" if delay <= 5.0 and (case != "steady" or rate <= 2.0) else "MISSED")
        print(f"{case:<16} {window:>6.0f}s {rate:>13.2f} {delay * 1000:>10.0f} ms "
              f"{raw * 1000:>9.0f} ms  {ok}  {dict(kinds)}", flush=True)
    if wrong:
        print(f"races that ended otherwise than they should: {', '.join(wrong)}")
    return 1 if wrong else 0


PEAK: dict[str, float] = {"base": 0.0, "rss": 0.0}


def _rss() -> float:
    """This process's resident memory in bytes (/proc/self/statm)."""
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _sample_memory(stop: threading.Event) -> None:
    """This process's peak RSS while the case runs, sampled every 0.5 s. The fake cluster
    runs in a process of its own (``_serve_fake``), so this is the flow's side alone: the
    backend, its watches and their copies of the pods."""
    while not stop.wait(0.5):
        PEAK["rss"] = max(PEAK["rss"], _rss())


def _serve_fake(case: str, window_s: float, line_every_s: float, conn: Connection) -> None:
    """The fake API with the case's script, in a child process: sends its URL, waits for the
    start of the steady window once the backend's run has ended, and sends back when the
    JobSet succeeded, when the API answered again (a fault case) and the requests of the
    steady window."""
    from tests.fakes.kube_api import FakeApiServer, FakeKube
    from tests.fakes.kube_api.scenarios import admit, say, scenario, start, succeed

    def touch(k: Any, name: str) -> None:  # a controller writes status: a watch event
        k.mutate("jobsets", "default", name, lambda o: o.setdefault("status", {}).update(
            observedAt=time.time()))

    def cut(k: Any, name: str) -> None:
        k.cut_watches()

    def burst(k: Any, name: str) -> None:  # a restarting API server: streams drop, then 503s
        k.fail_next(20)
        k.cut_watches()

    def throttle(k: Any, name: str) -> None:
        k.fail_next(10, status=429, retry_after=2)
        k.cut_watches()

    step = {"stream-aborts": 1.0, "watch-cuts": 2.0}.get(case, line_every_s)
    extra: dict[str, Callable[[Any, str], None]] = {"stream-aborts": touch, "watch-cuts": cut}
    body: list[tuple[float, Callable[[Any, str], None]]] = []
    for i in range(int(window_s / step)):
        body.append((step, extra.get(case, say(f"step {i} loss=0.5"))))
    if case == "503-burst":
        body.append((0.0, burst))
    if case == "429-retry-after":
        body.append((0.0, throttle))
    script = [(0.2, admit), (0.2, start), *body, (2.0 if "burst" in case or "429" in case
                                                 else 0.5, succeed)]
    kube = scenario(FakeKube(), script)
    if case == "stream-aborts":
        kube.drop_watch_every = 1
    with FakeApiServer(kube) as server:
        conn.send(server.url)
        steady_from = conn.recv()
        succeeded_at = kube.action_times["succeed"]
        conn.send((succeeded_at, kube.action_times.get("api_recovered", 0.0),
                   kube.requests_between(steady_from, succeeded_at)))


def run_case(case: str, window_s: float, line_every_s: float,
             slices: int = 0) -> tuple[float, float, float, Counter]:
    from flows.backends.gke.backend import GkeBackend
    from flows.config import load_profile
    from flows.core.layout import Layout
    from flows.core.programs import train_workload
    from flows.core.storage import LocalStorage, file_uri
    from tests.support.cluster import cluster_at
    from tests.support.profiles import TUTORIAL, TUTORIAL_REQUIRED

    class Quiet:
        def info(self, msg: str, *a: object) -> None:
            pass

        def warning(self, msg: str, *a: object) -> None:
            if os.environ.get("BENCH_VERBOSE"):
                print(f"  {time.monotonic():.1f} warning:", msg % a if a else msg)

    sets = {**TUTORIAL_REQUIRED, **({"gke.num_slices": str(slices)} if slices else {})}
    profile = load_profile(TUTORIAL, sets, environ={})
    spawn = multiprocessing.get_context("spawn")
    mine, theirs = spawn.Pipe()
    fake = spawn.Process(target=_serve_fake, args=(case, window_s, line_every_s, theirs),
                         daemon=True)
    fake.start()
    url = mine.recv()
    stop_sampling = threading.Event()
    if slices:
        PEAK.update(base=_rss(), rss=_rss())
        sampler = threading.Thread(target=_sample_memory, args=(stop_sampling,), daemon=True)
        sampler.start()
    with tempfile.TemporaryDirectory() as tmp:
        backend = GkeBackend(profile, logger=Quiet(), stage="train",
                             storage=LocalStorage(), cluster=cluster_at(url))
        workload = train_workload(profile, Layout(profile), backend.runtime)
        started = time.monotonic()  # CLOCK_MONOTONIC: one clock for both processes
        try:
            backend.run_workload(workload, file_uri(Path(tmp) / "train.log"))
        finally:
            if slices:
                stop_sampling.set()
                sampler.join()
        steady_from = started + 15.0
        mine.send(steady_from)
        succeeded_at, recovered_at, steady = mine.recv()
        fake.join(timeout=30)
        minutes = max(succeeded_at - steady_from, 1.0) / 60
        assert backend.monitor is not None and backend.monitor.noticed_at is not None
        raw = backend.monitor.noticed_at - succeeded_at
        delay = backend.monitor.noticed_at - max(succeeded_at, recovered_at)
        return (len(steady) / minutes, delay, raw,
                Counter(_kind(path) for _, _, path in steady))


def run_race(case: str, window_s: float) -> tuple[float, float, float, str]:
    """(requests/min over the run, notice delay, stage end after the deciding write, the
    verdict) for one race."""
    import dataclasses

    from flows.backends.gke.backend import GkeBackend
    from flows.backends.gke.capacity_pools import pool_node_labels, pool_taints
    from flows.config import load_profile
    from flows.core.budgets import Budgets
    from flows.core.failures import StageFailed
    from flows.core.layout import Layout
    from flows.core.programs import train_workload
    from flows.core.storage import LocalStorage, file_uri
    from flows.core.team_origin import outside_a_run
    from tests.fakes.kube_api import FakeApiServer, FakeKube
    from tests.fakes.kube_api.nodepools import Autoscaler, Reclaim, TpuPool
    from tests.fakes.kube_api.scenarios import (
        admit,
        operator_deletes,
        say,
        scenario,
        start,
        succeed,
        worker_crashes,
    )
    from tests.fakes.kube_api.tpu_nodes import MODE_LABELS, TPU_TAINT
    from tests.support.cluster import cluster_at
    from tests.support.profiles import TUTORIAL, TUTORIAL_REQUIRED

    class Quiet:
        def info(self, msg: str, *a: object) -> None:
            pass

        def warning(self, msg: str, *a: object) -> None:
            pass

    class Recording(GkeBackend):  # every monitor, not only the latest
        monitors: ClassVar[list[Any]] = []

        def _watch(self, live: Any, sink: Any, coordinator: str) -> Any:
            verdict = super()._watch(live, sink, coordinator)
            self.monitors.append(self.monitor)
            return verdict

    settings = {"gke.capacity": "spot", "gke.reservation": "",
                "gke.prices.spot.usd_per_chip_hour": "1.0", "gke.prices.spot.source": "bench",
                "gke.prices.spot.as_of": "2026-12-01"} if case in ("spot-reclaim",
                                                                   "stockout") else {}
    profile = load_profile(TUTORIAL, {**TUTORIAL_REQUIRED, **settings}, environ={})
    budgets = dataclasses.replace(Budgets(), schedule_s=window_s)
    run = [(0.2, admit), (0.2, start), (0.5, say("step 1", "saved checkpoint 1"))]
    scripts = {"spot-reclaim": [[*run, (window_s, succeed)],
                                [(0.2, admit), (0.2, start), (0.5, succeed)]],
               "operator-delete": [[*run, (2.0, operator_deletes)]],
               "worker-crash": [[*run, (2.0, worker_crashes)]],
               "stockout": [[*run, (0.5, succeed)]]}[case]
    decided_by = {"spot-reclaim": "head_gives_up", "operator-delete": "operator_deletes",
                  "worker-crash": "worker_crashes", "stockout": ""}[case]
    kube = scenario(FakeKube(), *scripts)
    scaler = None
    if case in ("spot-reclaim", "stockout"):
        # the spot pool's nodes as the blueprint deploys them: GKE's spot label, and the
        # team's label and taint when the teams file puts the profile in a team
        team = outside_a_run(profile.name).team
        name = team.name if team else None
        pool = TpuPool(labels={**MODE_LABELS["spot"], **pool_node_labels("spot", name)},
                       taints=[dict(TPU_TAINT), *pool_taints("spot", name)],
                       reclaim=Reclaim(kubelet_posts=False, pod_gc_s=4.0,
                                       program_gives_up_s=6.0),
                       stockout=case == "stockout", scale_up_backoff_s=5.0)
        scaler = Autoscaler(kube, pool)
    try:
        with FakeApiServer(kube) as server, tempfile.TemporaryDirectory() as tmp:
            backend = Recording(profile, logger=Quiet(), stage="train", budgets=budgets,
                                storage=LocalStorage(), cluster=cluster_at(server.url))
            workload = train_workload(profile, Layout(profile), backend.runtime)
            if case == "spot-reclaim":
                def reclaim() -> None:
                    while "log" not in kube.action_times or not scaler.nodes:
                        time.sleep(0.05)
                    scaler.preempt()
                import threading
                threading.Thread(target=reclaim, daemon=True).start()
            started = time.monotonic()
            try:
                outcome: Any = backend.run_workload(workload, file_uri(Path(tmp) / "t.log"))
                verdict = f"succeeded after {outcome.submissions} submission(s)"
            except StageFailed as exc:
                outcome = exc
                verdict = f"{exc.diagnosis.category}: {exc.diagnosis.summary[:90]}"
            ended = time.monotonic()
            first = backend.monitors[0]
            decided = kube.action_times.get(decided_by, first.noticed_at)
            minutes = max(ended - started, 1.0) / 60
            rate = len(kube.requests_between(started, ended)) / minutes
            return rate, first.noticed_at - decided, ended - decided, verdict
    finally:
        if scaler is not None:
            scaler.stop()


def _kind(path: str) -> str:
    base = path.split("?")[0]
    if base.endswith("/log"):
        return "log"
    return base.rstrip("/").split("/")[-1] + (" watch" if "watch=true" in path else "")


if __name__ == "__main__":
    raise SystemExit(main())
