"""Where a judged model is registered: ``promotion.register:``, one registry.

A promoted model becomes a version there; with MLflow a rejected one is registered too,
with its decision, but never gets the ``champion`` alias. The shapes are checked here, at
load; that the registry answers and its credentials resolve, before the first stage
(flows/integrations/preflight.py).
"""

from __future__ import annotations

import re
from typing import Annotated, Self

from pydantic import model_validator

from flows.config.errors import FixableValueError
from flows.config.limits import limits
from flows.config.secret_ref import SecretRef
from flows.config.section_base import StrictModel
from flows.config.tracking import TrackingUri
from flows.config.types import Checked, ProjectId, Region, refusing

_MLFLOW_MODEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._ -]{0,254}")
_HUB_REPO = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}")
_VERTEX_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9 _.-]{0,127}")



def _matching(regex: re.Pattern[str], what: str, fix: str, *texts: str,
              refused: str = "\0") -> Checked:
    """A name the regex matches whole, holding no ``refused`` text (a hub id no '..')."""
    return Checked(refusing(lambda v: None if regex.fullmatch(v) and refused not in v
                            else f"{v!r} is not {what}", fix), *texts, pattern=regex)


MlflowModelName = Annotated[str, _matching(_MLFLOW_MODEL, "a registered model name",
                                           "use letters, digits, spaces, '.', '_' and '-'")]
VertexModelName = Annotated[str, _matching(
    _VERTEX_NAME, "a model display name", "use up to 128 letters, digits, spaces, '.', '_', '-'")]
HubRepoId = Annotated[str, _matching(_HUB_REPO, "a hub repository id",
                                     "write owner/name, e.g. repo_id: my-org/qwen3-grpo",
                                     "owner/name, no '..'", refused="..")]

class MlflowRegistry(StrictModel):
    """The MLflow Model Registry of a tracking server."""

    tracking_uri: TrackingUri
    """The MLflow server holding the registry (http(s)://host:port)."""
    model_name: MlflowModelName
    """The registered model each judged run becomes a version of."""
    token: SecretRef | None = None
    """A bearer token for the server (MLFLOW_TRACKING_TOKEN), as a reference."""




class VertexRegistry(StrictModel):
    """The Vertex AI Model Registry: each promoted export a version of one model."""

    project: ProjectId
    """The GCP project of the registry."""
    location: Region
    """The Vertex AI region (e.g. us-central1)."""
    display_name: VertexModelName
    """The model's display name; its first upload creates it, later ones add versions."""
    serving_image: str
    """The serving container the model versions name (Vertex's containerSpec.imageUri)."""

class HubRegistry(StrictModel):
    """A Hugging Face Hub model repository: each promoted export uploaded as a revision."""

    repo_id: HubRepoId
    """The hub repository (owner/name); created when missing, private unless private: false.
    Only the model's files are uploaded (config, tokenizer, the safetensors weights)."""
    private: bool = True
    """Whether the models stay private (the default): a missing repository is created private,
    and a public one is refused (nothing uploaded). false creates a missing repository public
    and uploads into either. An existing repository's visibility is never changed."""
    token: SecretRef
    """The hub token with write access, as a reference (never a value)."""



class RegisterSection(StrictModel):
    """Exactly one registry a judged model is registered in."""

    mlflow: MlflowRegistry | None = None
    """The MLflow Model Registry (versions, tags, the champion alias)."""
    vertex: VertexRegistry | None = None
    """The Vertex AI Model Registry."""
    hub: HubRegistry | None = None
    """A Hugging Face Hub repository."""

    @model_validator(mode="after")
    @limits({"": "exactly one of mlflow, vertex, hub"})
    def _exactly_one(self) -> Self:
        if sum(r is not None for r in (self.mlflow, self.vertex, self.hub)) != 1:
            raise FixableValueError("name exactly one registry",
                                    "write one of register: {mlflow: ...}, {vertex: ...} or "
                                    "{hub: ...}")
        return self
