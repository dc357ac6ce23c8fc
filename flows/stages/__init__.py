"""The five stages, in the tutorial's order."""

from flows.stages.convert import ConvertStage
from flows.stages.export import ExportStage
from flows.stages.image import ImageStage
from flows.stages.infra import InfraStage
from flows.stages.train import TrainStage

STAGES = (ImageStage(), InfraStage(), ConvertStage(), TrainStage(), ExportStage())
STAGE_BY_NAME = {stage.name: stage for stage in STAGES}

__all__ = ["STAGES", "STAGE_BY_NAME"]
