"""Stage 3, convert: Hugging Face checkpoint → MaxText (orbax) checkpoint, `0/items`."""

from __future__ import annotations

from typing import Any

from flows.config.profile import Profile
from flows.core.backend import Backend, StageWork, WorkloadRun
from flows.core.failures import user_error
from flows.core.layout import Layout, convert_key
from flows.core.programs import convert_workload
from flows.core.stage import ProgramStage, StageContext, StageOutput, built_image
from flows.core.storage import join
from flows.core.verify import orbax_checkpoint_problems


class ConvertStage(ProgramStage):
    name = "convert"
    title = "Convert HF → MaxText"
    key = staticmethod(convert_key)

    def record_uri(self, ctx: StageContext) -> str:
        return ctx.layout.record(ctx.layout.convert_dir)

    def content_outputs(self, ctx: StageContext) -> tuple[str, ...]:
        return ("maxtext_checkpoint",)

    def leftover_dirs(self, ctx: StageContext) -> list[str]:
        return [ctx.layout.convert_dir]

    def plan_work(self, profile: Profile, backend: Backend) -> StageWork:
        layout = Layout(profile)
        return StageWork(inputs={"hf_model": backend.runtime.model().uri},
                        outputs={"maxtext_checkpoint": layout.converted_checkpoint},
                        workloads=[convert_workload(profile, layout, backend.runtime)],
                        notes=list(backend.runtime.setup(self.name).notes))

    def run(self, ctx: StageContext, upstream: dict[str, StageOutput]) -> list[WorkloadRun]:
        workload = convert_workload(ctx.profile, ctx.layout, ctx.backend.runtime,
                                    built_image(upstream))
        return [ctx.backend.run_workload(workload, ctx.layout.log(ctx.layout.convert_dir,
                                                                  workload.name))]

    def verify(self, ctx: StageContext) -> tuple[dict[str, str], dict[str, Any]]:
        items = ctx.layout.converted_checkpoint
        problems = orbax_checkpoint_problems(ctx.storage, items)
        if problems:
            raise user_error(self.name, "the converter finished without a complete MaxText checkpoint",
                             "; ".join(problems), "read the convert log beside the output directory; "
                             "if the conversion was cut short, delete the directory and run again")
        return {"maxtext_checkpoint": items}, {"entries": len(ctx.storage.children(items)),
                                               "lineage": join(ctx.layout.convert_dir)}
