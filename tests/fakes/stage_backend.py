"""A Backend whose programs are instant: for the stage model's tests (tests/stages).

Each "program" writes what the real one leaves behind (the orbax layout of to_maxtext, actor
checkpoints of train_rl, the HF files of to_huggingface), so the real Stage.execute, the real
lineage records and the real output checks (flows/core/verify.py) decide skip and rerun in
milliseconds. Faults are injected per workload name: ``damage[name]`` makes the program leave
an incomplete output, as a program cut short or a converter bug would; ``failing[name]``
makes it print those lines and exit 1, diagnosed from its log tail as the local backend does
(flows/backends/local/backend.py ``run_workload``: the whole output in the log, the last
``TAIL_LINES`` through ``diagnose_exit``).

Checkpoints get a data file with a random name, as orbax's OCDBT store names them
(tensorstore/kvstore/ocdbt/index.rst: ``d/<128-bit random identifier>``), so a rerun's
checkpoint differs from the last one byte-wise, as a real one does (the lineage identity is
the content's, flows/core/lineage.py ``verified_identity``).
"""

from __future__ import annotations

import json
import logging
import uuid
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

from flows.backends.local.backend import TAIL_LINES
from flows.backends.local.runtime import LocalRuntime
from flows.config import load_profile
from flows.config.profile import Profile
from flows.core.backend import ProgramRuntime, ProgramSetup, StageWork, WorkloadRun
from flows.core.budgets import local_stage_timeout_s
from flows.core.failures import StageFailed, diagnose_exit
from flows.core.layout import Layout
from flows.core.lineage import LineageRecord
from flows.core.manifest import LOGS_DIR
from flows.core.stage import StageContext, StageOutput
from flows.core.storage import LocalStorage, Storage, join
from flows.core.verify import newest_actor_step
from flows.core.workload import Workload
from flows.stages import STAGES, stages_for


class QuietRuntime(LocalRuntime):
    """The rehearsal's argv and placement, without the transformers load check."""

    def setup(self, program: str) -> ProgramSetup:
        return replace(super().setup(program), checks=())

    def accept(self, program: str, storage: Storage) -> dict[str, Any]:
        return {}


class MarkerStep:
    """An image or infra step whose whole output is one marker file."""

    content_outputs = ()

    def __init__(self, backend: FakeStageBackend, name: str) -> None:
        self.backend, self.name = backend, name
        self.marker = join(backend.layout.root, "fake", name, "done.txt")

    def plan(self) -> StageWork:
        return StageWork(outputs={self.name: self.marker}, actions=[f"make {self.name}"])

    def record_uri(self) -> str:
        return join(self.backend.layout.root, "fake", self.name, "tpurl-lineage.json")

    def present(self, ctx: StageContext, record: LineageRecord) -> bool:
        return ctx.storage.exists(self.marker)

    def leftover_dirs(self) -> list[str]:
        return []

    def run(self, ctx: StageContext) -> list[WorkloadRun]:
        self.backend.runs[self.name] += 1
        if self.name == "infra":  # the stand-ins later stages read
            self.backend.write(join(self.backend.layout.tiny_model_dir, "config.json"), "{}")
        ctx.storage.write_text(self.marker, "ok")
        return []

    def verify(self, ctx: StageContext) -> tuple[dict[str, str], dict[str, Any]]:
        return {self.name: self.marker}, {}


class FakeStageBackend:
    name = "fake"
    usd_per_chip_hour = 0.0

    def __init__(self, profile: Profile, storage: Storage | None = None,
                 runtime: ProgramRuntime | None = None) -> None:
        self.profile, self.layout = profile, Layout(profile)
        self.storage = storage or LocalStorage()
        self.runtime = runtime or QuietRuntime(profile, self.layout)
        self.image, self.infra = MarkerStep(self, "image"), MarkerStep(self, "infra")
        self.runs: Counter[str] = Counter()
        self.trained: list[tuple[int, int]] = []  # per train program: (from step, to step)
        self.damage: set[str] = set()
        self.failing: dict[str, list[str]] = {}  # workload name -> what it prints, exit 1
        # what each evaluation "program" scores: mean reward (and accuracy) per model
        self.scores: dict[str, float] = {"evaluate-base": 0.40, "evaluate-trained": 0.55}
        self.logger = logging.getLogger("tpurl-tests")

    def for_stage(self, stage: str, **_: object) -> FakeStageBackend:
        """Itself: the fake counts the runs of every stage of its run in one place."""
        return self

    def write(self, uri: str, text: str) -> None:
        self.storage.write_text(uri, text)

    def run_workload(self, workload: Workload, log_uri: str) -> WorkloadRun:
        self.runs[workload.name] += 1
        if (printed := self.failing.get(workload.name)) is not None:
            self.write(log_uri, "\n".join([workload.command_line(), *printed]) + "\n")
            raise StageFailed(workload.name.split("-")[0], diagnose_exit(workload.name, 1,
                                                           printed[-TAIL_LINES:]), log_uri)
        damaged = workload.name in self.damage
        layout = self.layout
        if workload.name == "convert-hf-to-maxtext":
            items = layout.converted_checkpoint
            self.write(join(items, "params", "x"), "weights")
            self.write(join(items, "d", uuid.uuid4().hex), "w")  # OCDBT: a run's own name
            if not damaged:
                self.write(join(items, "_METADATA"), "{}")
        elif workload.name == "train-grpo":
            # train_rl restores the newest checkpoint of its run directory and trains on
            # to num_batches (tunix 0.1.8 sft/peft_trainer.py maybe_restore, rl_learner.py)
            steps = int(self.profile.train.args.get("num_batches", 1))
            start = newest_actor_step(self.storage, layout.actor_checkpoints) or 0
            self.trained.append((start, steps))
            for step in range(start + 1, steps + 1 - int(damaged)):
                params = join(layout.actor_checkpoints, str(step), "model_params")
                self.write(join(params, "x"), "w")
                self.write(join(params, "d", uuid.uuid4().hex), "w")
        elif workload.name == "export-maxtext-to-hf":
            out = layout.export_dir
            for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
                self.write(join(out, name), "{}")
            shards = {"a": "model-1.safetensors", "b": "model-2.safetensors"}
            self.write(join(out, "model.safetensors.index.json"),
                       json.dumps({"weight_map": shards}))
            for shard in sorted(set(shards.values()))[: 1 if damaged else None]:
                self.write(join(out, shard), "w")
        elif workload.name.startswith("evaluate-"):
            self._score(workload, damaged)
        self.write(log_uri, f"{workload.command_line()}\n")
        return WorkloadRun(name=workload.name, wall_s=0.0, log_uri=log_uri)

    def _score(self, workload: Workload, damaged: bool) -> None:
        """What images/rehearsal/evaluate_rl.py writes to ``--out``: MaxText's counts and
        every response's reward (4 rows; the rewards spread around the model's mean)."""
        out = workload.argv[workload.argv.index("--out") + 1]
        mean = self.scores[workload.name]
        rewards = [mean - 0.1, mean - 0.05, mean + 0.05, mean + 0.1]
        checkpoint = next(a for a in workload.argv if a.startswith("load_parameters_path="))
        scores = {"checkpoint": checkpoint.split("=", 1)[1], "total": 4,
                  "correct": float(round(4 * mean)), "format_correct": 4, "mean_reward": mean,
                  "rewards": rewards, "overlap": 0, "trained_rows_checked": 2,
                  "questions": ["q1", "q2", "q3", "q4"]}
        self.write(Path(out).as_uri(), "{truncated" if damaged else json.dumps(scores))

    def clear_leftovers(self, stage: str, directory: str) -> int:
        return self.storage.remove_tree(directory, keep=(LOGS_DIR,))

    def stage_timeout_s(self, stage: str) -> float:
        return local_stage_timeout_s(self.profile)

    def estimated_chip_hours(self, stage: str) -> float:
        return 0.0

    def held_chip_hours(self, stage: str, wall_s: float) -> float:
        return 0.0

    def plan_header(self) -> list[str]:
        return []

    def plan_footer(self) -> list[str]:
        return []

    def write_plan_files(self, out_dir: Path, workloads: Any) -> list[Path]:
        return []

    def preflight(self) -> tuple[str, bool]:
        return "", True

    def validation_warnings(self) -> list[str]:
        return []

    def start_issues(self) -> list[Any]:
        return []


# --- driving the five stages the way the flow does (flows/pipeline.py), without Prefect ---
ORDER = [stage.name for stage in STAGES]
UPSTREAM = {"image": [], "infra": ["image"], "convert": ["image", "infra"],
            "train": ["image", "infra", "convert"], "export": ["image", "infra", "train"],
            "evaluate": ["image", "infra", "convert", "train", "export"]}


def backend_at(root: Path, **overrides: str) -> FakeStageBackend:
    profile = load_profile("rehearsal", {"local.root": str(root), **overrides}, environ={})
    return FakeStageBackend(profile)


def run_all(backend: FakeStageBackend, with_eval: bool = False) -> dict[str, StageOutput]:
    """The flow's order and wiring (flows/pipeline.py) without Prefect: the five stages, and
    the evaluate stage after them when ``with_eval`` (the profile has an eval section)."""
    ctx = StageContext(profile=backend.profile, layout=Layout(backend.profile),
                       backend=backend, storage=LocalStorage(), logger=backend.logger)
    outputs: dict[str, StageOutput] = {}
    for stage in stages_for(backend.profile) if with_eval else STAGES:
        upstream = {name: outputs[name] for name in UPSTREAM[stage.name]}
        outputs[stage.name] = stage.execute(ctx, upstream)
    return outputs


def statuses(outputs: dict[str, StageOutput]) -> dict[str, str]:
    return {name: out.status for name, out in outputs.items()}


def local(uri: str) -> Path:
    return Path(uri.removeprefix("file://"))
