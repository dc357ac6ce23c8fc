"""Events the flow emits, so automations and other deployments can chain on them.

Names are stable API (automations match on them; never rename):
- ``tpurl.stage.started|completed|skipped|failed`` for every stage, resource
  ``tpurl.stage.<profile>.<stage>``, payload: URIs, duration, failure category and summary;
  ``tpurl.stage.cancelled`` for the stage a user's cancel stopped (payload ``reason``,
  ``duration_s``; flows/runpage/cancel.py);
- ``tpurl.run.started`` once the profile is validated, resource ``tpurl.run.<profile>``,
  payload ``announcement``: what the run serves and what was coalesced into it (null when
  nobody announced it);
- ``tpurl.model.exported`` with the HF export URI (and the announcement), resource
  ``tpurl.model.<profile>``, as soon as the export stage ends (before evaluation).
Prefect adds the flow run and task run as related resources. Payloads pass the Redactor.
"""

from __future__ import annotations

from typing import Any

from prefect.events import emit_event

from flows.core.secrets import Redactor

STAGE_EVENT = "tpurl.stage.{status}"
MODEL_EXPORTED = "tpurl.model.exported"
RUN_STARTED = "tpurl.run.started"


def stage_resource(profile: str, stage: str) -> dict[str, str]:
    return {"prefect.resource.id": f"tpurl.stage.{profile}.{stage}",
            "prefect.resource.name": f"{profile} · {stage}",
            "tpurl.profile": profile, "tpurl.stage": stage}


def stage_event(status: str, profile: str, stage: str, redactor: Redactor,
                payload: dict[str, Any] | None = None) -> None:
    emit_event(event=STAGE_EVENT.format(status=status), resource=stage_resource(profile, stage),
               payload=_redact(payload or {}, redactor))


def run_started(profile: str, announcement: dict[str, Any] | None) -> None:
    emit_event(event=RUN_STARTED,
               resource={"prefect.resource.id": f"tpurl.run.{profile}",
                         "prefect.resource.name": f"{profile} run", "tpurl.profile": profile},
               payload={"announcement": announcement})


def model_exported(profile: str, uris: dict[str, Any]) -> None:
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
