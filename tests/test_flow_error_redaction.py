"""An exception of the flow body that is not a stage's (a bug, a library's error quoting the
URL it called with the token) reaches Prefect's state message, its persisted result and its
logs redacted: the real flow on a real Prefect API, read back from the API.

Before flows/core/error_redaction.py, Prefect wrote ``RuntimeError: ...<token>`` into the
flow run's state message (prefect/states.py exception_to_failed_state), which no log
redaction sees; the logs were already clean (the log-record factory redacts tracebacks)."""

from __future__ import annotations

import json
import random
import string
from pathlib import Path
from typing import Any

import pytest

from flows import pipeline
from flows.core.error_redaction import RedactedError, redact_exception
from flows.core.redaction import REDACTED, register

pytestmark = pytest.mark.services

_RNG = random.SystemRandom()
TOKEN_VAR = "TPURL_FLOW_ERROR_PROBE_TOKEN"


def _token() -> str:  # no hf_ shape: only the registry can catch it, not the shape patterns
    return "".join(_RNG.choice(string.ascii_letters) for _ in range(30))


class Unauthorized(Exception):
    """A library error with fields of its own, as an HTTP client's carries."""

    def __init__(self, url: str, status: int) -> None:
        super().__init__(f"{status} Client Error: Unauthorized for url: {url}")
        self.url, self.status = url, status


def _read_back(run_id: Any) -> dict[str, str]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.logging.handlers import APILogWorker

    APILogWorker.drain_all(timeout=10)
    with get_client(sync_client=True) as client:
        run = client.read_flow_run(run_id)
        logs = client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(
            any_=[run_id])), limit=200)
        return {"state message": str(run.state.message if run.state else ""),
                "flow run": json.dumps(run.model_dump(mode="json")),
                "logs": "\n".join(log.message for log in logs)}


@pytest.mark.parametrize("error", ["runtime", "library", "os"])
def test_an_internal_error_of_the_flow_body_is_redacted_in_state_and_logs(
        prefect_api: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: str) -> None:
    token = _token()
    monkeypatch.setenv(TOKEN_VAR, token)  # resolved, so registered, by require_secrets
    url = f"https://huggingface.co/api/whoami-v2?token={token}"

    def run_started(*_: Any) -> None:  # the flow body, after validation, before any task
        if error == "runtime":
            raise RuntimeError(f"could not announce the run: GET {url} failed")
        if error == "library":
            raise Unauthorized(url, 401)
        raise FileNotFoundError(2, "No such file or directory", f"/tmp/{token}.json")

    monkeypatch.setattr(pipeline.events, "run_started", run_started)
    state = pipeline.rl_post_training(profile="rehearsal", overrides={
        "local.root": str(tmp_path / "root"), "model.hf_token.env": TOKEN_VAR},
        return_state=True)
    assert state.is_failed(), state
    texts = _read_back(state.state_details.flow_run_id)
    texts["local state"] = str(state.message)
    texts["result"] = repr(state.result(raise_on_failure=False))
    leaks = [where for where, text in texts.items() if token in text]
    assert leaks == [], f"the token is in: {leaks}"
    # not vacuous: the failure is there, with its type and the redacted text
    expected = {"runtime": "RuntimeError: could not announce the run",
                "library": "Unauthorized: 401 Client Error",
                "os": "FileNotFoundError"}[error]
    assert expected in texts["state message"] and REDACTED in texts["state message"], texts
    assert expected.split(":")[0] in texts["logs"], texts["logs"]


def test_the_exception_keeps_its_type_and_fields_only_its_text_is_redacted() -> None:
    token = _token()
    register(token)
    exc = Unauthorized(f"https://hub/?token={token}", 401)
    try:
        raise exc from ValueError(f"cause with {token}")
    except Unauthorized as raised:
        clean = redact_exception(raised)
    assert clean is exc and token not in str(clean) and clean.status == 401
    assert token not in clean.url and clean.url.startswith("https://hub/")
    assert token not in str(clean.__cause__)
    os_error = redact_exception(FileNotFoundError(2, "No such file", f"/tmp/{token}"))
    assert isinstance(os_error, FileNotFoundError) and token not in str(os_error)
    assert os_error.filename == f"/tmp/{REDACTED}" and os_error.errno == 2

    class Opaque(Exception):
        def __str__(self) -> str:
            return f"opaque {token}"
    opaque = redact_exception(Opaque())
    assert isinstance(opaque, RedactedError) and str(opaque) == f"Opaque: opaque {REDACTED}"
