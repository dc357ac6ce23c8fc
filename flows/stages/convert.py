"""Stage 3, convert: Hugging Face checkpoint → MaxText (orbax) checkpoint, `0/items`."""

from __future__ import annotations

from typing import Any

from flows.backends.gke.infra.cost import stage_estimated_chip_hours
from flows.config.profile import Profile
from flows.core.layout import Layout, convert_key
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
from flows.stages.programs import convert_workload


class ConvertStage(Stage):
    name = "convert"
    title = "Convert HF → MaxText"

    def key(self, profile: Profile) -> str:
        return convert_key(profile)

    def record_uri(self, layout: Layout) -> str:
        return layout.record(layout.convert_dir)

    def plan(self, profile: Profile) -> StagePlan:
        layout = Layout(profile)
        source = (layout.tiny_model_dir if profile.backend == "local"
                  else f"hf://{profile.model.hf_repo}@{profile.model.hf_revision}")
        return StagePlan(stage=self.name, title=self.title, key=self.key(profile),
                         inputs={"hf_model": source},
                         outputs={"maxtext_checkpoint": layout.converted_checkpoint},
                         estimated_chip_hours=stage_estimated_chip_hours(profile, self.name),
                         workloads=[plan_workload(convert_workload(profile, layout))])

    def run(self, ctx: StageContext, upstream: dict[str, StageOutput]) -> list[WorkloadRun]:
        workload = convert_workload(ctx.profile, ctx.layout, built_image(upstream))
        return [ctx.backend.run_workload(workload, ctx.layout.log(ctx.layout.convert_dir,
                                                                  workload.name))]

    def verify(self, ctx: StageContext) -> tuple[dict[str, str], dict[str, Any]]:
        items = ctx.layout.converted_checkpoint
        entries = ctx.storage.children(items)
        if not entries:
            raise fail(self.name, "the converter finished but wrote no checkpoint", items,
                       "read the convert log beside the output directory")
        if not any(name.startswith("_") or name.endswith("METADATA") for name in entries):
            raise fail(self.name, "the checkpoint has no orbax metadata", ", ".join(entries[:20]),
                       "the conversion was cut short: delete the directory and run again")
        return {"maxtext_checkpoint": items}, {"entries": len(entries),
                                               "lineage": join(ctx.layout.convert_dir)}
