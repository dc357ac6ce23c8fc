"""Stage 2, infra: the place the work runs and the inputs it reads.

The backend provisions it (flows/backends/*/infra.py): on GKE the bucket and the Cluster
Toolkit blueprint with its IAM edit; in the rehearsal the output directory plus the stand-ins
for what the hub would serve (a tiny Qwen3-MoE and an OpenMathInstruct-2-shaped dataset).
"""

from __future__ import annotations

from flows.config.profile import Profile
from flows.core.backend import Backend, StepProvider
from flows.core.layout import infra_key
from flows.core.stage import ProvidedStage


class InfraStage(ProvidedStage):
    name = "infra"
    title = "Infrastructure"

    def key(self, profile: Profile) -> str:
        return infra_key(profile)

    def provider(self, backend: Backend) -> StepProvider:
        return backend.infra
