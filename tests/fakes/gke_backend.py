"""Running GkeBackend against the fake API in tests: short budgets, fast watch settings, a
logger that keeps its lines. Shared by the GKE backend's tests."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import time
from collections.abc import Iterator
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

from flows.backends.gke.backend import GkeBackend
from flows.backends.gke.watch.stream import WatchSettings
from flows.backends.gke.watch.vm_created import InstanceGet
from flows.config.profile import Profile
from flows.core.budgets import Budgets
from flows.core.eval_programs import evaluate_workload
from flows.core.failures import StageFailed
from flows.core.layout import Layout
from flows.core.programs import convert_workload, train_workload
from flows.core.storage import LocalStorage, file_uri
from tests.fakes.kube_api import FakeApiServer, FakeKube
from tests.support.cluster import cluster_at
from tests.support.prefect_database import seed_home
from tests.support.profiles import fake_hf_token, tutorial_profile

FAST = WatchSettings(timeout_s=2, read_timeout_s=5, connect_timeout_s=2, max_errors=3,
                     poll_interval_s=0.3, backoff_s=0.05, backoff_cap_s=0.2)
BUDGETS = Budgets(queue_s=30, run_s=30, preemptions=2, tick_s=0.1, log_drain_s=2,
                  delete_wait_s=5, api_s=3, pull_grace_s=30)


class ListLogger:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def info(self, msg: str, *args: object) -> None:
        self.lines.append(msg % args if args else msg)

    def warning(self, msg: str, *args: object) -> None:
        self.info(msg, *args)


def make_backend(url: str, stage: str, tmp: Path, logger: ListLogger,
                 budgets: Budgets = BUDGETS, profile: Profile | None = None,
                 instances: InstanceGet | None = None) -> GkeBackend:
    """``instances``: Compute Engine's instances.get for nodes that name a VM
    (tests/fakes/cloud/instances.py); the fake pools' nodes name none unless given a project."""
    profile = profile or tutorial_profile()
    return GkeBackend(profile, logger=logger, stage=stage,
                      storage=LocalStorage(), cluster=cluster_at(url), budgets=budgets,
                      watch_settings=FAST, api_backoff_s=0.05,
                      log_read_timeout_s=5, instances=instances)


def run_stage(server: FakeApiServer, stage: str, tmp: Path, budgets: Budgets = BUDGETS,
              profile: Profile | None = None, logger: ListLogger | None = None
              ) -> tuple[Any, ListLogger, str, GkeBackend]:
    """``logger``: one the test already watches from another thread (a fake that acts once
    the product has said something)."""
    logger = logger if logger is not None else ListLogger()
    backend = make_backend(server.url, stage, tmp, logger, budgets, profile)
    profile, layout = backend.profile, Layout(backend.profile)
    if stage == "evaluate":  # the trained model's JobSet (the profile must have eval)
        workload = evaluate_workload(profile, layout, backend.runtime, "trained",
                                     layout.actor_params(int(profile.train.args["num_batches"])))
    else:
        workload = (train_workload if stage == "train" else convert_workload)(
            profile, layout, backend.runtime)
    log_uri = file_uri(tmp / f"{stage}.log")
    try:
        outcome: Any = backend.run_workload(workload, log_uri)
    except StageFailed as exc:
        outcome = exc
    return outcome, logger, log_uri, backend


def no_jobsets_left(kube: FakeKube, within_s: float = 30.0) -> bool:
    """Foreground deletion takes a moment (the fake keeps the object until dependents go);
    the bound is generous for a loaded machine and costs nothing when the JobSet goes."""
    deadline = time.monotonic() + within_s
    while kube.find("jobsets") and time.monotonic() < deadline:
        time.sleep(0.05)
    return kube.find("jobsets") == []


def jobsets_created(kube: FakeKube) -> int:
    return sum(n for (plural, _), n in kube.created.items() if plural == "jobsets")


def prefect_flow_child(url: str, tmp: str) -> None:
    """A flow process as Prefect's runner starts it: a real flow run (ephemeral API in
    ``tmp``) whose task runs the GKE backend against the fake API at ``url``, until the
    runner's SIGTERM arrives. Its log lines go to ``tmp``/child.log."""
    import os

    os.environ["PREFECT_HOME"] = str(Path(tmp) / "prefect")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ["HF_TOKEN"] = fake_hf_token("u8jzPde0Ig")
    seed_home(Path(tmp) / "prefect")  # migrated: tests/support/prefect_database.py
    from prefect import flow, task

    log_file = Path(tmp) / "child.log"

    class FileLogger(ListLogger):
        def info(self, msg: str, *args: object) -> None:
            with log_file.open("a") as out:
                out.write((msg % args if args else msg) + "\n")

    @task
    def stage() -> None:
        backend = make_backend(url, "train", Path(tmp), FileLogger())
        workload = train_workload(backend.profile, Layout(backend.profile), backend.runtime)
        backend.run_workload(workload, file_uri(Path(tmp) / "train.log"))

    @flow
    def pipeline() -> None:
        stage()

    from flows.console.interrupts import private_api

    os.environ.pop("PREFECT_API_URL", None)
    # its server dies with this process, even by the runner's SIGTERM; 600 s to start (more
    # than `tpurl run`'s 120: a loaded CI machine took over 120 s, and the test only waits)
    with private_api(startup_timeout_s=600):
        pipeline()


@contextlib.contextmanager
def flow_child(url: str, tmp: Path) -> Iterator[BaseProcess]:
    """``prefect_flow_child`` in a spawned process, killed on the way out if still alive."""
    child = multiprocessing.get_context("spawn").Process(target=prefect_flow_child,
                                                         args=(url, str(tmp)))
    child.start()
    try:
        yield child
    finally:
        if child.is_alive():
            child.kill()


def child_is_running(tmp: Path, child: BaseProcess | None = None) -> bool:
    """The child's workload was seen running (its log says so); an AssertionError, at once,
    when ``child`` has died before that (a wait on it would last its whole bound)."""
    log = tmp / "child.log"
    if log.exists() and "is running" in log.read_text():
        return True
    assert child is None or child.is_alive(), f"the flow child died first (exit {child.exitcode})"
    return False


def cancel_like_the_runner(child: BaseProcess) -> None:
    """What the runner's kill() sends on a Prefect cancellation: SIGTERM, then a wait."""
    assert child.pid is not None
    os.kill(child.pid, signal.SIGTERM)
    child.join(30)
