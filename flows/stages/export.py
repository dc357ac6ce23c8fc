"""Stage 5, export: the newest actor checkpoint → a Hugging Face model directory.

Verification reads the export as a consumer would (flows/core/verify.py: config, tokenizer,
safetensors whose shards all exist); a backend may add checks of its own that prove the
export loads (the rehearsal loads it with transformers and compares it with the base model).
"""

from __future__ import annotations

from typing import Any

from flows.config.profile import Profile
from flows.core.backend import Backend, StageWork, WorkloadRun
from flows.core.failures import user_error
from flows.core.layout import Layout, export_key
from flows.core.programs import export_workload
from flows.core.stage import ProgramStage, StageContext, StageOutput, built_image
from flows.core.verify import hf_export_shards


class ExportStage(ProgramStage):
    name = "export"
    title = "Export MaxText → HF"
    key = staticmethod(export_key)

    def record_uri(self, ctx: StageContext) -> str:
        return ctx.layout.record(ctx.layout.export_dir)

    def content_outputs(self, ctx: StageContext) -> tuple[str, ...]:
        return ("hf_export",)

    def leftover_dirs(self, ctx: StageContext) -> list[str]:
        return [ctx.layout.export_dir]

    def plan_work(self, profile: Profile, backend: Backend) -> StageWork:
        layout = Layout(profile)
        step = int(profile.train.args.get("num_batches", 0))
        setup = backend.runtime.setup(self.name)
        return StageWork(inputs={"actor_checkpoint": layout.actor_params(step)},
                        outputs={"hf_export": layout.export_dir},
                        workloads=[export_workload(profile, layout, backend.runtime, step),
                                   *setup.checks],
                        notes=["the step is the newest actor checkpoint found at run time",
                               *setup.notes])

    def run(self, ctx: StageContext, upstream: dict[str, StageOutput]) -> list[WorkloadRun]:
        step = int(upstream["train"].details["newest_step"])
        layout, runtime = ctx.layout, ctx.backend.runtime
        workloads = [export_workload(ctx.profile, layout, runtime, step, built_image(upstream)),
                     *runtime.setup(self.name).checks]
        return [ctx.backend.run_workload(w, layout.log(layout.export_dir, w.name))
                for w in workloads]

    def verify(self, ctx: StageContext) -> tuple[dict[str, str], dict[str, Any]]:
        out = ctx.layout.export_dir
        shards, missing = hf_export_shards(ctx.storage, out)
        if missing:
            raise user_error(self.name, "the HF export is incomplete", "missing: " + ", ".join(missing),
                             "read the export log; delete the directory and run again")
        details: dict[str, Any] = {"shards": len(shards)}
        details.update(ctx.backend.runtime.accept(self.name, ctx.storage))
        return {"hf_export": out}, details
