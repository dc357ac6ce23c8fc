"""The five stages, in the tutorial's order, and the evaluate stage a profile may add."""

from flows.config.profile import Profile
from flows.core.stage import Stage
from flows.stages.convert import ConvertStage
from flows.stages.evaluate import EvaluateStage
from flows.stages.export import ExportStage
from flows.stages.image import ImageStage
from flows.stages.infra import InfraStage
from flows.stages.train import TrainStage

STAGES = (ImageStage(), InfraStage(), ConvertStage(), TrainStage(), ExportStage())
EVALUATE = EvaluateStage()  # after export, when the profile has an eval section
STAGE_BY_NAME: dict[str, Stage] = {stage.name: stage for stage in (*STAGES, EVALUATE)}


def stages_for(profile: Profile) -> tuple[Stage, ...]:
    """The stages a run of this profile goes through, in order."""
    return (*STAGES, EVALUATE) if profile.eval is not None else STAGES


__all__ = ["EVALUATE", "STAGES", "STAGE_BY_NAME", "stages_for"]
