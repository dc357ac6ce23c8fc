"""How far `tpurl run` walks through the code: the hops of a run's path, per backend.

Usage: python benchmarks/run_hops.py [--backend local|gke|both] [--walk] [--api URL]

What is measured (dynamic, over a real run):
- ``flows.cli.main(["run", PROFILE, ...])`` runs in this process under ``sys.setprofile``:
  the CLI's own Prefect API server (a real one, started as `tpurl run` starts it; with
  ``--api URL`` the running API there, as when PREFECT_API_URL names one: the tests' quick
  run gives their session's, which spares a server start per backend and leaves the walk
  as it is, the server's start being no call under ``flows/`` of the main thread), the real
  flow, its Prefect tasks, the run page, ``Stage.execute`` and the stages, the real
  ``backend_for``. Only what lies below the backend's entry is replaced: the backend class
  ``backend_for`` returns is an instant one (``tests/fakes/stage_backend.py``'s programs,
  which write what the real programs leave behind in milliseconds), so a whole run of the
  five stages takes seconds. For GKE the profile is the tutorial's
  (``qwen3-30b-a3b-v6e-32``), its backend instant too, its ``gs://`` outputs kept in a local
  directory, its program runtime the real ``GkeRuntime``. A real GKE run cannot be driven
  here: the fake cluster's world (tests/support/gke_world.py) needs dockerd and a registry
  for the image stage. What is measured is the flow's path above the backend, which is the
  same code for both backends but for the backend ``backend_for`` picks; the backend's own
  internals are not on it.
- The profiler keeps, for the main thread, the stack of frames whose code is under
  ``flows/`` (frames of anything else, Prefect's engines among them, are transparent: a
  ``flows`` function called by Prefect counts as called by the nearest ``flows`` frame
  below it). Frames of the instant backend count as one module, ``<backend>``. A module's
  body run by an import is not a call and is transparent too.
- Three landmarks, each the stack at the moment it is first called:
  1. the stage's backend call: the first call into the backend from inside
     ``Stage.execute`` (flows/core/stage.py) of the first stage;
  2. the result kept: the first call of ``persist_result``;
  3. the result shown: the first call of ``final_lines`` (what the terminal prints).
- The walk: from the entry down to landmark 1, back up to where landmark 2's stack
  branches off and down to it, then up and down again to landmark 3 (a path through the call
  tree, as the run's control goes). Each frame on it is named by its module; consecutive
  frames of one module are one step.
- Printed: **hops** (changes of module along the walk), the distinct modules and packages
  on the walk (a package is a module's dotted parent: ``flows.runpage.live`` is in
  ``flows.runpage``), the down-path hops of each stage's first backend call, and the
  distinct ``flows`` modules and packages any call of the run entered (its breadth), and
  the side calls: the modules off the walk that any call from a module on the walk entered
  (what the walk's modules lean on: the backend's choice, events, the page, the lock).
  ``--walk`` prints the walk itself.
- Below the backend, for GKE: one train stage's ``GkeBackend.run_workload`` (the real
  backend, its JobSet rendered, its Secret applied, its programs shipped, the JobSet watched
  to success) against the fake Kubernetes API over HTTP (tests/fakes/kube_api, the scenario
  the GKE backend's own tests run: admitted, started, two step lines, succeeded). Printed:
  the distinct ``flows`` modules and packages any call inside ``run_workload`` entered.

The figure is about the code's shape, not its speed: the run's wall time is printed only to
show the cost of the measurement.
Exits 1 when a run failed or did not reach the three landmarks. Its default is already its
quick run (the tests', seconds of instant stages per backend).
"""

from __future__ import annotations

import argparse
import itertools
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import FrameType
from typing import Any
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

FLOWS = str(ROOT / "flows") + os.sep
BACKEND_FILES = (str(ROOT / "tests" / "fakes" / "stage_backend.py"), __file__)
BACKEND = "<backend>"
STAGE_EXECUTE = ("flows.core.stage", "execute")
RESULT_KEPT, RESULT_SHOWN = "persist_result", "final_lines"


def module_of(filename: str) -> str | None:
    """``flows/runpage/live.py`` → ``flows.runpage.live``; the instant backend's files →
    ``<backend>``; anything else → None (transparent)."""
    if filename in BACKEND_FILES:
        return BACKEND
    if not filename.startswith(FLOWS):
        return None
    dotted = "flows." + filename[len(FLOWS):].removesuffix(".py").replace(os.sep, ".")
    return dotted.removesuffix(".__init__")


def package_of(module: str) -> str:
    return module if module == BACKEND else module.rsplit(".", 1)[0]


Frame = tuple[int, str, str]  # (call serial, module, function)


@dataclass
class Recorder:
    """The main thread's stack of flows frames, and the landmarks' stacks."""

    stack: list[Frame] = field(default_factory=list)
    ids: list[int] = field(default_factory=list)  # id(frame) of each entry of ``stack``
    serial: int = 0
    entered: set[str] = field(default_factory=set)
    stage_calls: list[list[Frame]] = field(default_factory=list)  # per Stage.execute
    landmarks: dict[str, list[Frame]] = field(default_factory=dict)
    # (caller's module, callee's module) of every call from one flows module into another
    edges: set[tuple[str, str]] = field(default_factory=set)
    _in_stage: bool = False

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            module = module_of(frame.f_code.co_filename)
            if module is None or frame.f_code.co_name == "<module>":  # an import, not a call
                return
            self.serial += 1
            entry = (self.serial, module, frame.f_code.co_name)
            if self.stack and self.stack[-1][1] != module:
                self.edges.add((self.stack[-1][1], module))
            self.stack.append(entry)
            self.ids.append(id(frame))
            self.entered.add(module)
            self._landmark(entry)
        elif event == "return" and self.ids and self.ids[-1] == id(frame):
            self.stack.pop()
            self.ids.pop()

    def _landmark(self, entry: Frame) -> None:
        _, module, function = entry
        if (module, function) == STAGE_EXECUTE:
            self._in_stage = True
            self.stage_calls.append([])
        elif module == BACKEND and self._in_stage and function != "__init__":
            inside = any((m, f) == STAGE_EXECUTE for _, m, f in self.stack)
            if inside and not self.stage_calls[-1]:
                self.stage_calls[-1] = list(self.stack)
                self.landmarks.setdefault("backend", list(self.stack))
        elif function == RESULT_KEPT and "kept" not in self.landmarks:
            self.landmarks["kept"] = list(self.stack)
        elif function == RESULT_SHOWN and "shown" not in self.landmarks:
            self.landmarks["shown"] = list(self.stack)


def walk(stacks: list[list[Frame]]) -> list[str]:
    """The modules met going from the entry down the first stack, then from each stack to the
    next through their common part (up, then down), one name per frame."""
    steps = [module for _, module, _ in stacks[0]]
    for here, there in itertools.pairwise(stacks):
        common = 0
        while (common < min(len(here), len(there))
               and here[common][0] == there[common][0]):
            common += 1
        steps += [module for _, module, _ in reversed(here[common - 1:-1])]
        steps += [module for _, module, _ in there[common:]]
    return steps


def squeeze(steps: list[str]) -> list[str]:
    return [m for i, m in enumerate(steps) if i == 0 or steps[i - 1] != m]


def hops(steps: list[str]) -> int:
    return len(squeeze(steps)) - 1


# --- the instant backends ---------------------------------------------------------------


def instant_local() -> type:
    from tests.fakes.stage_backend import FakeStageBackend

    class InstantLocalBackend(FakeStageBackend):
        def __init__(self, profile: Any, **_: Any) -> None:
            super().__init__(profile)

    return InstantLocalBackend


class BucketOnDisk:
    """``gs://bucket/path`` kept under a local directory (the instant GKE backend's storage)."""

    def __init__(self, root: Path) -> None:
        from flows.core.storage import LocalStorage

        self.root, self.local = root, LocalStorage()

    def _file(self, uri: str) -> str:
        if uri.startswith("file://"):
            return uri
        parsed = urlparse(uri)
        return (self.root / parsed.netloc / parsed.path.lstrip("/")).as_uri()

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self.local, name)

        def call(uri: str, *args: Any, **kwargs: Any) -> Any:
            return method(self._file(uri), *args, **kwargs)
        return call


def instant_gke(bucket_root: Path) -> type:
    from flows.backends.gke.runtime import GkeRuntime
    from flows.core.backend import ProgramSetup
    from tests.fakes.stage_backend import FakeStageBackend

    class QuietGkeRuntime(GkeRuntime):
        def setup(self, program: str) -> ProgramSetup:
            return replace(super().setup(program), checks=())

        def accept(self, program: str, storage: Any) -> dict[str, Any]:
            return {}

        def image(self, built: Any) -> str:
            return "registry.example/post-training@sha256:" + "0" * 64

    class InstantGkeBackend(FakeStageBackend):
        name = "gke"

        def __init__(self, profile: Any, **_: Any) -> None:
            super().__init__(profile, storage=BucketOnDisk(bucket_root),  # type: ignore[arg-type]
                             runtime=QuietGkeRuntime(profile))
            self.logger = logging.getLogger("tpurl-benchmark")

        def stage_timeout_s(self, stage: str) -> float:
            from flows.backends.gke.timing import stage_timeout_s

            return stage_timeout_s(self.profile, stage)

    return InstantGkeBackend


@contextmanager
def patched(module: Any, name: str, value: Any) -> Iterator[None]:
    old = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, old)


@dataclass
class Measured:
    backend: str
    exit_code: int
    wall_s: float
    recorder: Recorder


def two_teams(home: Path, profile: str) -> Path:
    """A teams file of two teams, the run's profile in one, their ledger in ``home``: the
    run's path with a team (its budget checked, its queue on the JobSet), as on a cluster
    that several teams share."""
    path = home / "teams.yaml"
    path.write_text(f"ledger_root: {(home / 'ledger').as_uri()}\nteams:\n"
                    f"  tutorial:\n    usd_per_month: 100000\n    profiles: [{profile}]\n"
                    f"  other:\n    usd_per_month: 100\n    profiles: [rehearsal]\n")
    return path


def measure(backend: str, home: Path, api: str | None = None) -> Measured:
    from flows import cli

    os.environ["TPURL_CACHE_DIR"] = str(home / "cache")
    os.environ["PREFECT_HOME"] = str(home / "prefect")
    os.environ["TPURL_KEEP_API_S"] = "0"
    if api:
        os.environ["PREFECT_API_URL"] = api
    else:
        os.environ.pop("PREFECT_API_URL", None)
    from tests.support.prefect_database import seed_home

    seed_home(home / "prefect")
    if backend == "local":
        import flows.backends.local.backend as where

        name, cls = "LocalBackend", instant_local()
        argv = ["run", "rehearsal", "--set", f"local.root={home / 'root'}"]
    else:
        import flows.backends.gke.backend as where
        from tests.support.profiles import TUTORIAL, TUTORIAL_REQUIRED, fake_hf_token

        os.environ["HF_TOKEN"] = fake_hf_token("RunHops")
        os.environ["TPURL_TEAMS_FILE"] = str(two_teams(home, TUTORIAL))
        name, cls = "GkeBackend", instant_gke(home / "buckets")
        argv = ["run", TUTORIAL, *(x for k, v in TUTORIAL_REQUIRED.items()
                                   for x in ("--set", f"{k}={v}"))]
    recorder = Recorder()
    started = time.monotonic()
    with ExitStack() as patches:
        patches.enter_context(patched(where, name, cls))
        if backend == "gke":  # what the flow reads outside the backend (the team ledger)
            import flows.backends.gke.gcs as gcs

            patches.enter_context(patched(gcs, "GcsStorage",
                                          lambda: BucketOnDisk(home / "buckets")))
        threading.setprofile(None)
        sys.setprofile(recorder)
        try:
            code = cli.main(argv)
        finally:
            sys.setprofile(None)
    return Measured(backend, code, time.monotonic() - started, recorder)


class Entered:
    """The flows modules any call entered while it is set (imports are not calls)."""

    def __init__(self) -> None:
        self.modules: set[str] = set()

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code.co_name != "<module>":
            module = module_of(frame.f_code.co_filename)
            if module is not None and module != BACKEND:
                self.modules.add(module)


def measure_run_workload(home: Path) -> tuple[bool, set[str]]:
    """One GKE train stage's ``run_workload`` against the fake Kubernetes API: whether the
    stage succeeded, and the flows modules its calls entered."""
    from flows.core.failures import StageFailed
    from flows.core.layout import Layout
    from flows.core.programs import train_workload
    from flows.core.storage import file_uri
    from tests.fakes.gke_backend import ListLogger, make_backend
    from tests.fakes.kube_api import FakeApiServer, FakeKube
    from tests.fakes.kube_api.scenarios import admit, say, scenario, start, succeed

    steps = [(0.05, admit), (0.05, start), (0.05, say("Train step 1 training loss: 1.0")),
             (0.05, say("Train step 2 training loss: 0.9")), (0.05, succeed)]
    with FakeApiServer(FakeKube()) as server:
        scenario(server.kube, steps)
        backend = make_backend(server.url, "train", home, ListLogger())
        workload = train_workload(backend.profile, Layout(backend.profile), backend.runtime)
        entered = Entered()
        sys.setprofile(entered)
        try:
            backend.run_workload(workload, file_uri(home / "train.log"))
            ok = True
        except StageFailed:
            ok = False
        finally:
            sys.setprofile(None)
    return ok, entered.modules


def report_run_workload(ok: bool, modules: set[str]) -> None:
    print(f"\ngke: one train stage's run_workload against the fake Kubernetes API: "
          f"{'succeeded' if ok else 'failed'}")
    print(f"  flows modules entered: {len(modules)}, packages: "
          f"{len({package_of(m) for m in modules})}")


def report(m: Measured, show_walk: bool) -> None:
    r = m.recorder
    missing = [k for k in ("backend", "kept", "shown") if k not in r.landmarks]
    print(f"\n{m.backend}: `tpurl run` exit {m.exit_code}, {m.wall_s:.1f} s under the profiler")
    if missing:
        print(f"  landmarks not reached: {', '.join(missing)}")
        return
    steps = walk([r.landmarks["backend"], r.landmarks["kept"], r.landmarks["shown"]])
    modules = {s for s in steps}
    packages = {package_of(s) for s in steps}
    down = [module for _, module, _ in r.landmarks["backend"]]
    print(f"  hops (entry → stage's backend call → result kept → result shown): {hops(steps)}")
    print(f"  of which entry → stage's backend call: {hops(down)}")
    print(f"  distinct modules on the walk: {len(modules)}, packages: {len(packages)}")
    fan = {callee for caller, callee in r.edges if caller in modules} - modules
    print(f"  side calls: modules off the walk that the walk's modules call into: {len(fan)} "
          f"(packages {len({package_of(m) for m in fan})})")
    per_stage = [hops([module for _, module, _ in s]) for s in r.stage_calls if s]
    print(f"  entry → backend call, per stage ({len(per_stage)} stages): {per_stage}")
    flows_entered = {m for m in r.entered if m != BACKEND}
    print(f"  breadth: flows modules entered during the run: {len(flows_entered)}, packages: "
          f"{len({package_of(m) for m in flows_entered})}")
    if show_walk:
        print("  walk: " + " → ".join(squeeze(steps)))
        print("  side calls: " + ", ".join(sorted(fan)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("local", "gke", "both"), default="both")
    parser.add_argument("--walk", action="store_true", help="print the walk's modules")
    parser.add_argument("--api", help="a running Prefect API for the runs, instead of the "
                                      "own server each `tpurl run` starts")
    args = parser.parse_args()
    if args.backend == "both":  # each in a process of its own: Prefect's settings are read once
        return max(subprocess.run([sys.executable, __file__, "--backend", backend,
                                   *(["--walk"] if args.walk else []),
                                   *(["--api", args.api] if args.api else [])]).returncode
                   for backend in ("local", "gke"))
    with tempfile.TemporaryDirectory(prefix=f"run-hops-{args.backend}-") as tmp:
        measured = measure(args.backend, Path(tmp), args.api)
        below = measure_run_workload(Path(tmp)) if args.backend == "gke" else (True, set())
    report(measured, args.walk)
    if args.backend == "gke":
        report_run_workload(*below)
        if args.walk:
            print("  modules: " + ", ".join(sorted(below[1])))
    return 0 if measured.exit_code == 0 and len(measured.recorder.landmarks) == 3 and below[0] \
        else 1


if __name__ == "__main__":
    raise SystemExit(main())
