"""What a stage may ask of the world: the Backend protocol and its two halves.

A stage knows *what* to produce (a patched image, a place to run, a MaxText checkpoint, …) and
how to tell it is done; a backend knows *where and how*. Every place where the rehearsal and
GKE differ is a method here, so stage modules never branch on which backend they have, and a
third backend is one more folder under flows/backends/ that implements this protocol.

- ``image`` and ``infra`` are :class:`StageProvider`: the image and infra stages are thin
  adapters over them (plan text, where the lineage record lives, is the output still there,
  make it, verify it).
- ``runtime`` is a :class:`ProgramRuntime`: how the three MaxText programs are adapted to the
  place they run (image name, where the model is read from, launcher, placement, env).
- ``stage_timeout_s`` says how long a stage's task may run here (:class:`Timing`), computed
  in flows/core/budgets.py from this backend's own facts;
- ``run_workload`` runs one :class:`~flows.core.workload.Workload` to its verdict;
  ``run_independent`` runs programs none of which needs another's output (at once where the
  backend has room, :class:`RunsTogether`).

Constructing a backend never does I/O (plans are pure); connections are made on first use.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from pydantic import BaseModel

from flows.core.storage import Storage
from flows.core.workload import Placement, ProgramFile, Workload

if TYPE_CHECKING:
    from flows.common.issues import Issue
    from flows.core.lineage import LineageRecord
    from flows.core.redaction import Redactor
    from flows.core.stage import StageContext

Env = tuple[tuple[str, str], ...]
ON_CPU = Placement(kind="cpu")  # one pod on the CPU pool, or the laptop


class WorkloadRun(BaseModel):
    name: str
    wall_s: float
    log_uri: str
    submissions: int = 1  # JobSets created for it (GKE: 1 + resubmissions after preemption)
    preemptions: int = 0  # attempts that ended because the slice was preempted
    preempted_chip_hours: float = 0.0  # held by those attempts: the work since their newest
    # checkpoint is done again, so this bounds what preemption cost
    # GKE: one entry per attempt (mode, zone, waited_s, held_s, chip_hours, usd, outcome), in
    # order: which capacity mode and zone trained, and what each fallback waited and cost
    capacity: list[dict[str, Any]] = []


# (workload name, step, total steps or None): how a program's progress reaches the run page
ProgressCallback = Callable[[str, int, int | None], None]


class StageLogger(Protocol):
    def info(self, msg: str, *args: object) -> None: ...
    def warning(self, msg: str, *args: object) -> None: ...


@dataclass(frozen=True)
class StageWork:
    """What a stage will do and what comes out (pure): the part of its :class:`StagePlan`
    (flows/core/stage.py) that a provider or a program stage states; the key, title and
    chip-hours around it are added the same way for every stage."""

    outputs: dict[str, str]
    inputs: dict[str, str] = field(default_factory=dict)
    actions: list[str] = field(default_factory=list)
    workloads: list[Workload] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


class StageProvider(Protocol):
    """A backend's implementation of a whole stage (image or infra)."""

    content_outputs: tuple[str, ...]  # outputs whose files the lineage manifest covers

    def plan(self) -> StageWork: ...

    def record_uri(self) -> str:
        """Where this stage's lineage record lives (it must exist before the stage runs)."""
        ...

    def present(self, ctx: StageContext, record: LineageRecord) -> bool:
        """Is what the record describes still there? (a teardown, a deleted venv: run again)"""
        ...

    def leftover_dirs(self) -> list[str]:
        """Directories to clear of an unverified attempt's files before running."""
        ...

    def run(self, ctx: StageContext) -> list[WorkloadRun]: ...

    def verify(self, ctx: StageContext) -> tuple[dict[str, str], dict[str, Any]]: ...


@runtime_checkable
class ExclusiveProvider(Protocol):
    """A StageProvider whose whole stage must not run twice at once on one machine (the
    rehearsal's venvs, shared by every local profile): ``exclusive`` is held from the
    done-check to the written record, so a run that waited skips what the other built."""

    def exclusive(self, ctx: StageContext) -> AbstractContextManager[None]: ...


@runtime_checkable
class RecordKeeper(Protocol):
    """A StageProvider whose lineage record lives with its output rather than in storage.

    The GKE image is the case: its output is a registry tag, and the bucket a storage record
    would need does not exist before infra runs. ``read_record`` answers from where the output
    lives (None: not there); ``store_record`` keeps what it can and returns the record as
    ``read_record`` will return it later, so the fingerprint downstream stages record stays
    the same across runs."""

    def read_record(self, ctx: StageContext) -> LineageRecord | None: ...

    def store_record(self, ctx: StageContext, record: LineageRecord) -> LineageRecord: ...


@dataclass(frozen=True)
class ModelSource:
    """The model the programs start from: what ``--hf_model_path`` gets (a hub repo id, or a
    local directory) and the same as a URI for plans and lineage (``hf://repo@revision``,
    ``file://``)."""

    path: str
    uri: str


@dataclass(frozen=True)
class ProgramSetup:
    """How one MaxText program (convert, train or export) runs on a backend: what its
    Workload takes from the backend rather than from the profile and the layout.
    flows/core/programs.py puts each part in place, the same way for every backend."""

    launcher: tuple[str, ...] = ()  # argv[0:n] in place of ``python3 -m MODULE`` (a stand-in)
    args: tuple[str, ...] = ()  # the backend's own arguments (their place: programs.py)
    placement: Placement = ON_CPU
    env: Env = ()  # environment beyond the workload's own
    preamble: tuple[str, ...] = ()  # shell lines the image runs before argv
    notes: tuple[str, ...] = ()  # what a user must know about this program here (a stand-in)
    checks: tuple[Workload, ...] = ()  # run after the program; ``accept`` reads their verdicts
    files: tuple[ProgramFile, ...] = ()  # programs of ours it runs that the image lacks
    # where the backend puts a workload's shipped files (GKE: the ConfigMap's mount); None:
    # the program reads them where they are (the rehearsal)
    shipped_dir: str | None = None
    # where export reads the tokenizer (``--hf_model_path``), when not the model's own path:
    # a folder the preamble filled at the pinned revision
    tokenizer: str | None = None


class ProgramRuntime(Protocol):
    """How the MaxText programs (flows/core/programs.py) run on this backend. One question
    per concern, asked per program, so a fourth program is one more ``setup`` answer."""

    def image(self, built: str | None) -> str:
        """The image a workload runs: the image stage's output, or what a plan shows."""
        ...

    def model(self) -> ModelSource: ...

    def dataset_uri(self) -> str | None:
        """The training data the stage reads, when the pipeline provides it."""
        ...

    def setup(self, program: str) -> ProgramSetup:
        """``program`` is the stage's name: convert, train or export."""
        ...

    def accept(self, program: str, storage: Storage) -> dict[str, Any]:
        """Read the verdicts of the program's ``checks`` (details for the lineage record);
        raise StageFailed when one refuses the output."""
        ...


class Running(Protocol):
    """Running a stage's programs and owning its files: what ``tpurl run`` needs."""

    @property
    def storage(self) -> Storage: ...

    def run_workload(self, workload: Workload, log_uri: str) -> WorkloadRun: ...

    def clear_leftovers(self, stage: str, directory: str) -> int:
        """Remove what an unverified attempt left in ``directory`` (logs stay), unless a live
        workload of this stage still writes there; returns the number of files removed."""
        ...


@runtime_checkable
class RunsTogether(Protocol):
    """A backend with room to run a stage's independent programs at once: the local one (a
    CPU core each). A GKE slice holds one Pathways job at a time, so there they run in turn."""

    def run_workloads(self, runs: Sequence[tuple[Workload, str]]
                      ) -> list[WorkloadRun | BaseException]:
        """Each (workload, log URI) run to its end; each one's run or the exception it
        ended with, in order. An interruption of the caller stops them all and is raised."""
        ...


def run_independent(backend: Running, runs: Sequence[tuple[Workload, str]]
                    ) -> list[WorkloadRun | BaseException | None]:
    """Run programs none of which needs another's output: at once where the backend can
    (every one runs to its end), else in turn, stopping at the first failure (those after it:
    None, not run). A failure is returned, not raised: the caller keeps what succeeded."""
    if isinstance(backend, RunsTogether):
        return list(backend.run_workloads(runs))
    outcomes: list[WorkloadRun | BaseException | None] = [None] * len(runs)
    for index, (workload, log_uri) in enumerate(runs):
        try:
            outcomes[index] = backend.run_workload(workload, log_uri)
        except Exception as exc:
            outcomes[index] = exc
            break
    return outcomes


class Pricing(Protocol):
    """What the TPU chips cost: plans estimate, results report what was held."""

    @property
    def usd_per_chip_hour(self) -> float: ...

    def estimated_chip_hours(self, stage: str) -> float:
        """TPU chip-hours a stage is expected to hold (plans; 0 where no TPU is billed)."""
        ...

    def held_chip_hours(self, stage: str, wall_s: float) -> float:
        """TPU chip-hours a stage actually held for ``wall_s`` seconds (results)."""
        ...


class Planning(Protocol):
    """What ``tpurl plan`` and ``validate`` print and check; none of it changes the world."""

    def plan_header(self) -> list[str]: ...

    def plan_footer(self) -> list[str]: ...

    def write_plan_files(self, out_dir: Path, workloads: Mapping[str, Workload]) -> list[Path]:
        """Extra files of ``tpurl plan --out`` (e.g. the Kubernetes objects that would be
        submitted for the stages' planned ``workloads``)."""
        ...

    def preflight(self) -> tuple[str, bool]:
        """Read-only checks against the world for ``tpurl plan --check``: (report, all passed)."""
        ...

    def validation_warnings(self) -> list[str]:
        """Valid but risky settings worth printing at ``tpurl validate``."""
        ...

    def start_issues(self) -> list[Issue]:
        """What this environment lacks to run the profile's stages (programs, a daemon,
        credentials); the flow refuses to start while any is listed. Reads, never changes."""
        ...


class Timing(Protocol):
    """How long a stage may take here: the flow's task timeouts and the run's bound ask the
    backend (flows/backends/__init__.py ``stage_timeout_s``), never its internals."""

    def stage_timeout_s(self, stage: str) -> float:
        """Seconds a task of ``stage`` may run before Prefect ends it: the most this
        backend's own watch lets the stage's programs take, plus slack (the arithmetic:
        flows/core/budgets.py)."""
        ...


class Backend(Running, Pricing, Planning, Timing, Protocol):
    """Everything a stage needs from the world, for one profile and one stage at a time:
    the two steps it implements whole, how its programs run, and the four concerns above."""

    name: str

    @property
    def image(self) -> StageProvider: ...

    @property
    def infra(self) -> StageProvider: ...

    @property
    def runtime(self) -> ProgramRuntime: ...

    def for_stage(self, stage: str, *, logger: StageLogger, redactor: Redactor,
                  on_progress: ProgressCallback | None) -> Backend:
        """The run's backend bound to one stage and its task's logger, its run-wide parts
        (the profile's, the team's and origin's, decided once) shared: a stage builds none."""
        ...
