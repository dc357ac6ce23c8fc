"""Stage 5, export: the newest actor checkpoint → a Hugging Face model directory.

Verification reads the export as a consumer would: config, tokenizer, a safetensors index
whose shards all exist; in the rehearsal it also loads the model with transformers (in its
own venv with CPU torch) and checks that the weights differ from the base model.
"""

from __future__ import annotations

import json
from typing import Any

from flows.backends.gke.infra.cost import stage_estimated_chip_hours
from flows.config.profile import Profile
from flows.core.layout import Layout, export_key
from flows.core.stage import (
    Stage,
    StageContext,
    StageOutput,
    StagePlan,
    WorkloadRun,
    built_image,
    fail,
    plan_workload,
)
from flows.core.storage import join
from flows.stages.programs import export_workload, hf_check_workload

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
HF_CHECK_NAME = "verify-hf-export-loads"


class ExportStage(Stage):
    name = "export"
    title = "Export MaxText → HF"

    def key(self, profile: Profile) -> str:
        return export_key(profile)

    def record_uri(self, layout: Layout) -> str:
        return layout.record(layout.export_dir)

    def plan(self, profile: Profile) -> StagePlan:
        layout = Layout(profile)
        step = int(profile.train.args.get("num_batches", 0))
        workloads = [export_workload(profile, layout, step)]
        if profile.backend == "local":
            workloads.append(hf_check_workload(profile, layout))
        return StagePlan(stage=self.name, title=self.title, key=self.key(profile),
                         inputs={"actor_checkpoint": layout.actor_params(step)},
                         outputs={"hf_export": layout.export_dir},
                         estimated_chip_hours=stage_estimated_chip_hours(profile, self.name),
                         workloads=[plan_workload(w) for w in workloads],
                         notes=["the step is the newest actor checkpoint found at run time"])

    def run(self, ctx: StageContext, upstream: dict[str, StageOutput]) -> list[WorkloadRun]:
        step = int(upstream["train"].details["newest_step"])
        layout = ctx.layout
        runs = []
        for workload in self._workloads(ctx.profile, layout, step, built_image(upstream)):
            runs.append(ctx.backend.run_workload(workload, layout.log(layout.export_dir,
                                                                      workload.name)))
        return runs

    def _workloads(self, profile: Profile, layout: Layout, step: int,
                   image: str | None = None) -> list:
        workloads = [export_workload(profile, layout, step, image)]
        if profile.backend == "local":
            workloads.append(hf_check_workload(profile, layout))
        return workloads

    def verify(self, ctx: StageContext) -> tuple[dict[str, str], dict[str, Any]]:
        out = ctx.layout.export_dir
        storage = ctx.storage
        missing = [f for f in ("config.json", *TOKENIZER_FILES)
                   if not storage.exists(join(out, f))]
        index_text = storage.read_text(join(out, "model.safetensors.index.json"))
        shards: list[str] = []
        if index_text is not None:  # sharded export: every shard the index names must exist
            shards = sorted(set(json.loads(index_text)["weight_map"].values()))
            missing += [s for s in shards if not storage.exists(join(out, s))]
        elif storage.exists(join(out, "model.safetensors")):
            shards = ["model.safetensors"]  # to_huggingface writes one file for small models
        else:
            missing.append("model.safetensors.index.json or model.safetensors")
        if missing:
            raise fail(self.name, "the HF export is incomplete", "missing: " + ", ".join(missing),
                       "read the export log; delete the directory and run again")
        details: dict[str, Any] = {"shards": len(shards)}
        if ctx.profile.backend == "local":
            details["load_check"] = self._load_check(ctx)
        return {"hf_export": out}, details

    def _load_check(self, ctx: StageContext) -> dict[str, Any]:
        log = ctx.storage.read_text(ctx.layout.log(ctx.layout.export_dir, HF_CHECK_NAME)) or ""
        reports = [line for line in log.splitlines() if line.startswith("{")]
        if not reports:
            raise fail(self.name, "the load check printed no report", log[-2000:],
                       "run images/rehearsal/check_hf_export.py by hand")
        report = json.loads(reports[-1])
        if report.get("architecture") != "Qwen3MoeForCausalLM":
            raise fail(self.name, "transformers loaded the export as the wrong class",
                       json.dumps(report), "check the export's config.json")
        if not report.get("tensors_changed"):
            raise fail(self.name, "the exported weights equal the base model's: training "
                       "changed nothing", json.dumps(report),
                       "check that rewards vary (GRPO advantages are zero otherwise)")
        return report
