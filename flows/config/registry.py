"""Where a judged model is registered: ``promotion.register:``, one registry.

A promoted model becomes a version there; with MLflow a rejected one is registered too,
with its decision, but never gets the ``champion`` alias. The shapes are checked here, at
load; that the registry answers and its credentials resolve, before the first stage
(flows/integrations/preflight.py).
"""

from __future__ import annotations

import re
from typing import Self

from pydantic import field_validator, model_validator

from flows.config.errors import FixableValueError
from flows.config.limits import limit, limits, matches
from flows.config.secret_ref import SecretRef
from flows.config.section_base import StrictModel
from flows.config.tracking import TRACKING_URI_LIMIT, tracking_uri_problem

_MLFLOW_MODEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._ -]{0,254}")
_HUB_REPO = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}")
_GCP_PROJECT = re.compile(r"[a-z][a-z0-9-]{4,28}[a-z0-9]")
_REGION = re.compile(r"[a-z]+-[a-z]+[0-9]")
_VERTEX_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9 _.-]{0,127}")


class MlflowRegistry(StrictModel):
    """The MLflow Model Registry of a tracking server."""

    tracking_uri: str
    """The MLflow server holding the registry (http(s)://host:port)."""
    model_name: str
    """The registered model each judged run becomes a version of."""
    token: SecretRef | None = None
    """A bearer token for the server (MLFLOW_TRACKING_TOKEN), as a reference."""

    @field_validator("tracking_uri")
    @classmethod
    @limit(TRACKING_URI_LIMIT)
    def _http(cls, v: str) -> str:
        if found := tracking_uri_problem(v):
            raise FixableValueError(*found)
        return v.rstrip("/")

    @field_validator("model_name")
    @classmethod
    @limit(f"letters, digits, spaces, '.', '_' and '-'; {matches(_MLFLOW_MODEL)}")
    def _name(cls, v: str) -> str:
        if not _MLFLOW_MODEL.fullmatch(v):
            raise FixableValueError(f"{v!r} is not a registered model name",
                                    "use letters, digits, spaces, '.', '_' and '-'")
        return v


class VertexRegistry(StrictModel):
    """The Vertex AI Model Registry: each promoted export a version of one model."""

    project: str
    """The GCP project of the registry."""
    location: str
    """The Vertex AI region (e.g. us-central1)."""
    display_name: str
    """The model's display name; its first upload creates it, later ones add versions."""
    serving_image: str
    """The serving container the model versions name (Vertex's containerSpec.imageUri)."""

    @model_validator(mode="after")
    @limits({"project": matches(_GCP_PROJECT), "location": matches(_REGION),
             "display_name": f"up to 128 letters, digits, spaces, '.', '_', '-'; "
                             f"{matches(_VERTEX_NAME)}"})
    def _names(self) -> Self:
        if not _GCP_PROJECT.fullmatch(self.project):
            raise FixableValueError(f"{self.project!r} is not a GCP project id",
                                    "write the id `gcloud projects list` shows", field="project")
        if not _REGION.fullmatch(self.location):
            raise FixableValueError(f"{self.location!r} is not a Vertex AI region",
                                    "e.g. location: us-central1", field="location")
        if not _VERTEX_NAME.fullmatch(self.display_name):
            raise FixableValueError(f"{self.display_name!r} is not a model display name",
                                    "use up to 128 letters, digits, spaces, '.', '_', '-'",
                                    field="display_name")
        return self


class HubRegistry(StrictModel):
    """A Hugging Face Hub model repository: each promoted export uploaded as a revision."""

    repo_id: str
    """The hub repository (owner/name); created when missing, private unless private: false.
    Only the model's files are uploaded (config, tokenizer, the safetensors weights)."""
    private: bool = True
    """Whether the models stay private (the default): a missing repository is created private,
    and a public one is refused (nothing uploaded). false creates a missing repository public
    and uploads into either. An existing repository's visibility is never changed."""
    token: SecretRef
    """The hub token with write access, as a reference (never a value)."""

    @field_validator("repo_id")
    @classmethod
    @limit(f"owner/name, no '..'; {matches(_HUB_REPO)}")
    def _repo(cls, v: str) -> str:
        if not _HUB_REPO.fullmatch(v) or ".." in v:
            raise FixableValueError(f"{v!r} is not a hub repository id",
                                    "write owner/name, e.g. repo_id: my-org/qwen3-grpo")
        return v


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

    @property
    def kind(self) -> str:
        return "mlflow" if self.mlflow else "vertex" if self.vertex else "hub"
