"""The serving canary of a watch: what the evaluation program is told, and what its canary
file says (pure).

The program (images/rehearsal/evaluate_rl.py ``--canary-out``) scores the served model
where it scores the champion's checkpoint: in the watch's own evaluation (a JobSet on GKE,
a process in the rehearsal), with the training's reward functions, after the checkpoint's
scores. It writes ``canary.json`` beside ``scores.json``: the same scores file, or
``{"unreachable": reason}`` when the server gave no usable answer. The key never reaches
the program's command line: it is a secret reference handed to the backend as the
workload's ``TPURL_CANARY_API_KEY`` (resolved at the last moment, flows/core/secrets.py).
Decision 0042 says why the program, and not the flow, asks the server.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from pydantic import ValidationError

from flows.common.paths import REPO_ROOT, SERVED_CLIENT, file_digest
from flows.config.secret_ref import SecretRef
from flows.config.watch import CanarySection
from flows.core.redaction import redact
from flows.core.scores import ScoresFile
from flows.core.storage import join, program_path
from flows.core.workload import ProgramFile

CANARY_FILE = "canary.json"
API_KEY_ENV = "TPURL_CANARY_API_KEY"  # images/rehearsal/served_completions.py reads it
REASON_CHARS = 400  # of an unreachable server's reason, in the record and the output


def canary_args(canary: CanarySection, out: str) -> list[str]:
    """The program's canary options (never the key)."""
    return ["--canary-out", program_path(join(out, CANARY_FILE)),
            "--canary-endpoint", canary.endpoint, "--canary-model", canary.model,
            "--canary-prompts", str(canary.prompts), "--canary-timeout", f"{canary.timeout_s:g}"]


def canary_secret_env(canary: CanarySection) -> tuple[tuple[str, SecretRef], ...]:
    return ((API_KEY_ENV, canary.api_key),) if canary.api_key is not None else ()


def client_program_file() -> ProgramFile:
    """The client, shipped beside the evaluation program (it imports it from its folder)."""
    return ProgramFile(name=SERVED_CLIENT.name,
                       source=str(SERVED_CLIENT.relative_to(REPO_ROOT)),
                       digest=file_digest(SERVED_CLIENT))


def served_name(canary: CanarySection) -> str:
    """The served model for people: ``MODEL at ENDPOINT``."""
    return f"{canary.model} at {canary.endpoint}"


@dataclass(frozen=True)
class CanaryResult:
    """The canary file read: its scores, or why the served model could not be scored."""

    scores: ScoresFile | None
    unreachable: str = ""


def _reason(text: str) -> str:
    """A server's words as the record keeps them: redacted, on one line, cut."""
    flat = " ".join(redact(text).split())
    return flat if len(flat) <= REASON_CHARS else flat[: REASON_CHARS - 2] + " …"


def read_canary(text: str | None) -> CanaryResult:
    """What the program left: scores with at least one row, else an unreachable reason (a
    missing or unreadable file, a server that answered nothing usable)."""
    if text is None:
        return CanaryResult(None, "the watch's evaluation wrote no canary scores (its log "
                                  "beside the scores says why)")
    try:
        data = json.loads(text)
    except ValueError:
        return CanaryResult(None, "the canary scores file is not JSON")
    if isinstance(data, dict) and isinstance(data.get("unreachable"), str):
        return CanaryResult(None, _reason(data["unreachable"]))
    try:
        scores = ScoresFile.model_validate(data)
    except ValidationError as exc:
        return CanaryResult(None, f"the canary scores file is unreadable "
                                  f"({str(exc).splitlines()[0]})")
    if scores.total <= 0:
        return CanaryResult(None, "the served model was sent no prompt (the watched set "
                                  "has no rows after the evaluation's filter)")
    return CanaryResult(scores)
