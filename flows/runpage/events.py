"""Events the flow emits, so automations and other deployments can chain on them:
``tpurl.stage.*`` for every stage, ``tpurl.run.started`` and ``tpurl.model.exported``.
Their names, resources and payload keys are in flows/common/event_catalogue.py (stable API;
docs/reference/events.md); payloads pass the catalogue's key check, then the Redactor.
"""

from __future__ import annotations

from typing import Any

from prefect.events import emit_event

from flows.common.event_catalogue import MODEL_EXPORTED, RUN_STARTED, stage_kind
from flows.core.secrets import Redactor


def stage_resource(profile: str, stage: str) -> dict[str, str]:
    return {"prefect.resource.id": f"tpurl.stage.{profile}.{stage}",
            "prefect.resource.name": f"{profile} · {stage}",
            "tpurl.profile": profile, "tpurl.stage": stage}


def stage_event(status: str, profile: str, stage: str, redactor: Redactor,
                payload: dict[str, Any] | None = None) -> None:
    kind = stage_kind(status)
    emit_event(event=kind.name, resource=stage_resource(profile, stage),
               payload=_redact(kind.checked(payload or {}), redactor))


def run_started(profile: str, announcement: dict[str, Any] | None) -> None:
    emit_event(event=RUN_STARTED.name,
               resource={"prefect.resource.id": f"tpurl.run.{profile}",
                         "prefect.resource.name": f"{profile} run", "tpurl.profile": profile},
               payload=RUN_STARTED.checked({"announcement": announcement}))


def model_exported(profile: str, uris: dict[str, Any]) -> None:
    emit_event(event=MODEL_EXPORTED.name,
               resource={"prefect.resource.id": f"tpurl.model.{profile}",
                         "prefect.resource.name": f"{profile} HF export",
                         "tpurl.profile": profile},
               payload=MODEL_EXPORTED.checked(uris))


def _redact(value: Any, redactor: Redactor) -> Any:
    if isinstance(value, str):
        return redactor(value)
    if isinstance(value, dict):
        return {k: _redact(v, redactor) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact(v, redactor) for v in value]
    return value
