"""The infra stage on GKE: bucket, Cluster Toolkit blueprint with the IAM edit, deploy, and
the checks that the result is what the profile asks for (infra_stage.py holds the logic)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from flows.core.backend import StageWork, WorkloadRun
from flows.core.layout import infra_key
from flows.core.lineage import LineageRecord
from flows.core.stage import StageContext
from flows.core.storage import join

if TYPE_CHECKING:
    from flows.backends.gke.backend import GkeBackend


class GkeInfra:
    content_outputs: tuple[str, ...] = ()

    def __init__(self, backend: GkeBackend) -> None:
        self.profile, self.gke, self.layout = backend.profile, backend.gke, backend.layout

    def plan(self) -> StageWork:
        from flows.backends.gke.infra.infra_stage import gke_plan_actions, gke_plan_notes

        profile, gke = self.profile, self.gke
        model = profile.model
        return StageWork(
            outputs={"root": self.layout.root, "cluster": f"{gke.project}/{gke.zone}/{gke.cluster}",
                     "hf_model": f"hf://{model.hf_repo}@{model.hf_revision}"},
            actions=gke_plan_actions(profile),
            # the cost block is printed once, at the end of the plan
            notes=[n for n in gke_plan_notes(profile) if not n.startswith(("TPU cost", "  "))])

    def record_uri(self) -> str:
        return join(self.layout.root, "infra", infra_key(self.profile), "tpurl-lineage.json")

    def present(self, ctx: StageContext, record: LineageRecord) -> bool:
        from flows.backends.gke.infra.infra_stage import gke_outputs_present

        return gke_outputs_present(self.profile)  # a teardown since the record: deploy again

    def leftover_dirs(self) -> list[str]:
        return []

    def run(self, ctx: StageContext) -> list[WorkloadRun]:
        from flows.backends.gke.infra.infra_stage import run_gke

        run_gke(self.profile, ctx.logger)
        return []

    def verify(self, ctx: StageContext) -> tuple[dict[str, str], dict[str, Any]]:
        from flows.backends.gke.infra.infra_stage import verify_gke

        uris, details = verify_gke(self.profile)
        model = self.profile.model
        return {**uris, "hf_model": f"hf://{model.hf_repo}@{model.hf_revision}"}, details
