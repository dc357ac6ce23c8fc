"""Stage 2, infra: the place the work runs and the inputs it reads.

The backend provisions it (flows/backends/*/infra.py): on GKE the bucket and the Cluster
Toolkit blueprint with its IAM edit; in the rehearsal the output directory plus the stand-ins
for what the hub would serve (a tiny Qwen3-MoE and an OpenMathInstruct-2-shaped dataset).
"""

from __future__ import annotations

from flows.common.failure_codes import Failure
from flows.core.backend import Backend, StageProvider
from flows.core.dataset import FIELD, dataset_problem
from flows.core.failures import user_error
from flows.core.layout import infra_key
from flows.core.stage import ProvidedStage, StageContext


class InfraStage(ProvidedStage):
    name = "infra"
    title = "Infrastructure"
    key = staticmethod(infra_key)

    def provider(self, backend: Backend) -> StageProvider:
        return backend.infra

    def check_inputs(self, ctx: StageContext) -> None:
        """The dataset a run trains on (an announced version included) is checked here, the
        first stage that can reach it, so a bad one is refused before any program starts."""
        value = ctx.profile.data.train_files
        if value and (found := dataset_problem(ctx.storage, value)):
            problem, fix = found
            raise user_error(self.name, f"{FIELD}: {problem}", f"    {FIELD}={value}", fix,
                             code=Failure.DATA_INVALID)
