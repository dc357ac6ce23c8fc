"""``tpurl.run.failed``: one event per failed run, carrying what a person needs to act.

Why one more event beside ``tpurl.stage.failed``: a stage's event fires per attempt (a
retried infrastructure fault fails a stage more than once) and not at all when the run is
refused before its first stage (a profile or environment error); Prefect's own
``prefect.flow-run.Failed`` carries no diagnosis and no profile label an automation can be
scoped to. This one is emitted by the flow's ``on_failure`` hook, which Prefect 3.9.1 calls
once when the flow run ends Failed (prefect/flow_engine.py ``call_hooks``; a timed-out run
ends in ``TimedOut``, a Failed type, and is included); a run that ends Crashed or Cancelled
has no hook here and sends nothing.

Payload (stable keys, every text through the redactor): ``stage`` (empty before the first
stage), ``category`` (the failure vocabulary of flows/core/failures.py; ``budget`` is a spend
cap reached), ``code``, ``summary``, ``fix``, ``log``, ``run`` (the flow run's name),
``support_bundle`` (the command that collects a report) and ``url`` (the run's page, when the
client knows the UI's address). Resource ``tpurl.run.<profile>``, labelled ``tpurl.profile``;
the flow run is a related resource, so an automation's template has ``flow_run``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flows.common.event_catalogue import RUN_FAILED
from flows.common.failure_codes import Failure
from flows.config.errors import EnvironmentNotReady, ProfileError
from flows.console.output import diagnosis_of
from flows.core.deadline import RunTimedOut
from flows.core.failures import FailureCategory, StageFailed
from flows.core.redaction import Redactor

INTERNAL_FIX = ("an undiagnosed error, most likely the pipeline's own bug: send the support "
                "bundle (the command above) with the run's log")


def profile_name(parameter: Any) -> str:
    """The profile a run was given: a shipped name as is, a file by its stem (the file's
    ``name:`` is its stem by convention, profile.py's rule of thumb)."""
    text = str(parameter or "rehearsal")
    return Path(text).stem if text.endswith((".yaml", ".yml")) else text


def failure_fields(exc: BaseException | None) -> dict[str, str]:
    """Pure: the event's diagnosis fields for the exception a run ended with."""
    found = diagnosis_of(exc)
    if isinstance(found, StageFailed):
        d = found.diagnosis
        return {"stage": found.stage, "category": str(d.category), "code": d.code,
                "summary": d.summary, "fix": d.fix, "log": found.log_uri or ""}
    if isinstance(found, ProfileError):
        code = (Failure.PROFILE_ENVIRONMENT if isinstance(found, EnvironmentNotReady)
                else Failure.PROFILE_INVALID)
        return {"stage": "", "category": str(FailureCategory.USER_ERROR), "code": code,
                "summary": str(found).splitlines()[0],
                "fix": "; ".join(f"{i.field}: {i.fix}" for i in found.issues), "log": ""}
    if isinstance(exc, RunTimedOut):  # its message names the bound and the fix
        first, _, rest = str(exc).partition("\n")
        return {"stage": "", "category": str(FailureCategory.STALLED), "code": Failure.RUN_TIMED_OUT,
                "summary": first, "fix": rest.strip() or "raise flow_timeout_s", "log": ""}
    if isinstance(exc, StageFailed):  # an internal error: diagnosis_of leaves it out
        d = exc.diagnosis
        return {"stage": exc.stage, "category": str(d.category), "code": d.code,
                "summary": d.summary, "fix": d.fix or INTERNAL_FIX, "log": exc.log_uri or ""}
    text = f"{type(exc).__name__}: {exc}" if exc is not None else "the run failed"
    return {"stage": "", "category": str(FailureCategory.INTERNAL), "code": "",
            "summary": text.splitlines()[0][:500], "fix": INTERNAL_FIX, "log": ""}


def failure_payload(exc: BaseException | None, profile: str, run_name: str,
                    url: str | None, redactor: Redactor) -> dict[str, str]:
    fields = failure_fields(exc)
    fields.update(run=run_name, url=url or "",
                  support_bundle=f"tpurl support-bundle {profile} --run {run_name}")
    return {key: redactor(value) for key, value in fields.items()}


def on_run_failed(flow: Any, flow_run: Any, state: Any) -> None:
    """The flow's ``on_failure`` hook (signature of prefect/flows.py ``FlowStateHook``)."""
    from prefect.events import emit_event
    from prefect.utilities.urls import url_for

    profile = profile_name((flow_run.parameters or {}).get("profile"))
    exc = state.result(raise_on_failure=False)
    url = url_for(flow_run, url_type="ui")
    emit_event(event=RUN_FAILED.name,
               resource={"prefect.resource.id": f"tpurl.run.{profile}",
                         "prefect.resource.name": f"{profile} run", "tpurl.profile": profile},
               related=[{"prefect.resource.id": f"prefect.flow-run.{flow_run.id}",
                         "prefect.resource.role": "flow-run",
                         "prefect.resource.name": flow_run.name}],
               payload=failure_payload(exc if isinstance(exc, BaseException) else None,
                                       profile, flow_run.name, url, Redactor()))
