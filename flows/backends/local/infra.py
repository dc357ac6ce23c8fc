"""The rehearsal's infrastructure: an output directory, plus stand-ins for what the hub would
serve (a tiny checkpoint of ``model.maxtext_name``'s structure, flows/config/rehearsal_models.py,
and an OpenMathInstruct-2-shaped dataset), built
deterministically by scripts that run in the rehearsal venv. Nothing contacts a hub.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from flows.backends.local.runtime import REHEARSAL_IMAGE, rehearsal_script
from flows.config.rehearsal_models import rehearsal_model
from flows.core.backend import StageWork, WorkloadRun
from flows.core.failures import user_error
from flows.core.lineage import LineageRecord
from flows.core.stage import StageContext
from flows.core.storage import join, program_path
from flows.core.workload import Placement, Workload

if TYPE_CHECKING:
    from flows.backends.local.backend import LocalBackend

TINY_MODEL_FILES = ("config.json", "model.safetensors.index.json", "tokenizer.json")


class LocalInfra:
    # the synthetic dataset is made whatever the run trains on; the one it trains on is named
    # by the run page (an announced data.train_files is not an output of this stage)
    content_outputs: tuple[str, ...] = ("hf_model", "synthetic_dataset")

    def __init__(self, backend: LocalBackend) -> None:
        self.backend = backend
        self.profile, self.layout = backend.profile, backend.layout

    def source_workloads(self) -> list[Workload]:
        local, layout = self.profile.local, self.layout
        assert local is not None
        return [
            Workload(name="make-tiny-model", image=REHEARSAL_IMAGE, placement=Placement("cpu"),
                     argv=("python3", rehearsal_script("make_tiny_model.py"), "--out",
                           program_path(layout.tiny_model_dir), "--seed",
                           str(local.tiny_model_seed), "--model", self.profile.model.maxtext_name)),
            Workload(name="make-dataset", image=REHEARSAL_IMAGE, placement=Placement("cpu"),
                     argv=("python3", rehearsal_script("make_dataset.py"), "--out",
                           program_path(layout.dataset_file), "--rows", str(local.dataset_rows),
                           "--seed", str(local.dataset_seed))),
        ]

    def plan(self) -> StageWork:
        layout = self.layout
        return StageWork(
            outputs={"root": layout.root, "hf_model": layout.tiny_model_dir,
                     "synthetic_dataset": layout.dataset_file},
            actions=[f"create {layout.root}"], workloads=self.source_workloads(),
            notes=["the tiny model and dataset stand in for the hub, which the rehearsal "
                   "never contacts"])

    def record_uri(self) -> str:
        return self.layout.record(self.layout.sources_dir)

    def present(self, ctx: StageContext, record: LineageRecord | None) -> bool:
        layout, storage = self.layout, ctx.storage
        return (storage.exists(layout.dataset_file)
                and all(storage.exists(join(layout.tiny_model_dir, f)) for f in TINY_MODEL_FILES))

    def leftover_dirs(self) -> list[str]:
        return [self.layout.sources_dir]

    def run(self, ctx: StageContext) -> list[WorkloadRun]:
        layout = self.layout
        return [self.backend.run_workload(w, layout.log(layout.sources_dir, w.name))
                for w in self.source_workloads()]

    def verify(self, ctx: StageContext) -> tuple[dict[str, str], dict[str, Any]]:
        layout = self.layout
        if not self.present(ctx, None):
            raise user_error("infra", "the rehearsal sources are incomplete", layout.sources_dir,
                             "read the make-tiny-model / make-dataset logs beside them")
        config_text = ctx.storage.read_text(join(layout.tiny_model_dir, "config.json")) or "{}"
        config = json.loads(config_text)
        expected = rehearsal_model(self.profile.model.maxtext_name).model_type
        if config.get("model_type") != expected:
            raise user_error("infra", f"the tiny model's model_type is not {expected!r}",
                             config_text[:500], "check images/rehearsal/make_tiny_model.py")
        return ({"root": layout.root, "hf_model": layout.tiny_model_dir,
                 "synthetic_dataset": layout.dataset_file},
                {"model_type": expected, "num_hidden_layers": config.get("num_hidden_layers"),
                 "num_experts": config.get("num_experts")})
