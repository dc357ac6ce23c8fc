"""Events the flow emits, so automations and other deployments can chain on them.

Names are stable API (automations match on them; never rename):
- ``tpurl.stage.started|completed|skipped|failed`` for every stage, resource
  ``tpurl.stage.<profile>.<stage>``, payload: URIs, duration, failure category and summary;
- ``tpurl.model.exported`` with the HF export URI, resource ``tpurl.model.<profile>``.
Prefect adds the flow run and task run as related resources. Payloads pass the Redactor.
"""

from __future__ import annotations

from typing import Any

from prefect.events import emit_event

from flows.core.secrets import Redactor

STAGE_EVENT = "tpurl.stage.{status}"
MODEL_EXPORTED = "tpurl.model.exported"


def stage_resource(profile: str, stage: str) -> dict[str, str]:
    return {"prefect.resource.id": f"tpurl.stage.{profile}.{stage}",
            "prefect.resource.name": f"{profile} · {stage}",
            "tpurl.profile": profile, "tpurl.stage": stage}


def stage_event(status: str, profile: str, stage: str, redactor: Redactor,
                payload: dict[str, Any] | None = None) -> None:
    emit_event(event=STAGE_EVENT.format(status=status), resource=stage_resource(profile, stage),
               payload=_redact(payload or {}, redactor))


def model_exported(profile: str, uris: dict[str, str]) -> None:
    emit_event(event=MODEL_EXPORTED,
               resource={"prefect.resource.id": f"tpurl.model.{profile}",
                         "prefect.resource.name": f"{profile} HF export",
                         "tpurl.profile": profile},
               payload=dict(uris))


def _redact(value: Any, redactor: Redactor) -> Any:
    if isinstance(value, str):
        return redactor(value)
    if isinstance(value, dict):
        return {k: _redact(v, redactor) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact(v, redactor) for v in value]
    return value
