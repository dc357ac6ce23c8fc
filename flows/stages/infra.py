"""Stage 2, infra: the place the work runs and the inputs it reads.

On GKE: bucket, Cluster Toolkit blueprint with the IAM edit, gcluster deploy (issue #4); the
plan lists those steps. In the rehearsal: the output directory, plus the stand-ins for what
the hub would serve (a tiny Qwen3-MoE checkpoint and an OpenMathInstruct-2-shaped dataset),
built deterministically by scripts that run in the rehearsal environment.
"""

from __future__ import annotations

import json
from typing import Any

from flows.config.profile import Profile
from flows.core.layout import Layout, infra_key
from flows.core.paths import REHEARSAL_DIR, REPO_ROOT
from flows.core.stage import Stage, StageContext, StageOutput, StagePlan, WorkloadRun, fail
from flows.core.storage import join
from flows.core.workload import Placement, Workload
from flows.stages.programs import REHEARSAL_IMAGE, program_path

TINY_MODEL_FILES = ("config.json", "model.safetensors.index.json", "tokenizer.json")


def source_workloads(profile: Profile, layout: Layout) -> list[Workload]:
    assert profile.local is not None
    local = profile.local
    script = lambda name: str((REHEARSAL_DIR / name).relative_to(REPO_ROOT))  # noqa: E731
    return [
        Workload(name="make-tiny-model", image=REHEARSAL_IMAGE, placement=Placement("cpu"),
                 argv=("python3", script("make_tiny_model.py"), "--out",
                       program_path(layout.tiny_model_dir), "--seed", str(local.tiny_model_seed))),
        Workload(name="make-dataset", image=REHEARSAL_IMAGE, placement=Placement("cpu"),
                 argv=("python3", script("make_dataset.py"), "--out",
                       program_path(layout.dataset_file), "--rows", str(local.dataset_rows),
                       "--seed", str(local.dataset_seed))),
    ]


class InfraStage(Stage):
    name = "infra"
    title = "Infrastructure"

    def key(self, profile: Profile) -> str:
        return infra_key(profile)

    def record_uri(self, layout: Layout) -> str:
        if layout.profile.backend == "local":
            return layout.record(layout.sources_dir)
        return join(layout.root, "infra", infra_key(layout.profile), "tpurl-lineage.json")

    def plan(self, profile: Profile) -> StagePlan:
        layout = Layout(profile)
        if profile.backend == "local":
            workloads = source_workloads(profile, layout)
            from flows.core.stage import plan_workload

            return StagePlan(
                stage=self.name, title=self.title, key=self.key(profile), inputs={},
                outputs={"root": layout.root, "hf_model": layout.tiny_model_dir,
                         "dataset": layout.dataset_file},
                actions=[f"create {layout.root}"], workloads=[plan_workload(w) for w in workloads],
                notes=["the tiny model and dataset stand in for the hub, which the rehearsal "
                       "never contacts"])
        from flows.backends.gke.infra.entry import gke_plan_actions, gke_plan_notes

        gke = profile.gke
        assert gke is not None
        return StagePlan(
            stage=self.name, title=self.title, key=self.key(profile), inputs={},
            outputs={"root": layout.root, "cluster": f"{gke.project}/{gke.zone}/{gke.cluster}",
                     "hf_model": f"hf://{profile.model.hf_repo}@{profile.model.hf_revision}"},
            actions=gke_plan_actions(profile),
            # the cost block is printed once, at the end of the plan
            notes=[n for n in gke_plan_notes(profile) if not n.startswith(("TPU cost", "  "))])

    def outputs_present(self, ctx: StageContext, record: Any) -> bool:
        layout = ctx.layout
        if ctx.profile.backend != "local":
            from flows.backends.gke.infra.entry import gke_outputs_present

            return gke_outputs_present(ctx.profile)  # a teardown since the record: deploy again
        return (ctx.storage.exists(layout.dataset_file)
                and all(ctx.storage.exists(join(layout.tiny_model_dir, f)) for f in TINY_MODEL_FILES))

    def run(self, ctx: StageContext, upstream: dict[str, StageOutput]) -> list[WorkloadRun]:
        if ctx.profile.backend != "local":
            from flows.backends.gke.infra.entry import run_gke

            run_gke(ctx.profile, ctx.logger)  # type: ignore[arg-type]
            return []
        layout = ctx.layout
        return [ctx.backend.run_workload(w, layout.log(layout.sources_dir, w.name))
                for w in source_workloads(ctx.profile, layout)]

    def verify(self, ctx: StageContext) -> tuple[dict[str, str], dict[str, Any]]:
        layout = ctx.layout
        if ctx.profile.backend != "local":
            from flows.backends.gke.infra.entry import verify_gke

            uris, details = verify_gke(ctx.profile)
            model = ctx.profile.model
            return {**uris, "hf_model": f"hf://{model.hf_repo}@{model.hf_revision}"}, details
        if not self.outputs_present(ctx, None):
            raise fail(self.name, "the rehearsal sources are incomplete", layout.sources_dir,
                       "read the make-tiny-model / make-dataset logs beside them")
        config_text = ctx.storage.read_text(join(layout.tiny_model_dir, "config.json")) or "{}"
        config = json.loads(config_text)
        if config.get("model_type") != "qwen3_moe":
            raise fail(self.name, "the tiny model is not a Qwen3-MoE", config_text[:500],
                       "check images/rehearsal/make_tiny_model.py")
        return ({"root": layout.root, "hf_model": layout.tiny_model_dir,
                 "dataset": layout.dataset_file},
                {"num_hidden_layers": config.get("num_hidden_layers"),
                 "num_experts": config.get("num_experts")})
