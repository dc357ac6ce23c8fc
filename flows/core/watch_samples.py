"""The champion's sample outputs a watch shows: a few responses next to their prompts and
rewards, bounded and with secrets taken out (pure).

Why these bounds: the samples travel in ``watch-history.json``, in the regressed event's
payload (an event API whose body Prefect caps, and which anyone with the workspace reads)
and in a message, so a few short ones: enough for a person to see what the model says now,
never a whole evaluation's text. Why redacted: a model's text is untrusted output, and a
prompt or response may hold a token (one the data carried, or one a reward function put in
the process): the samples pass the project's one redactor (flows/core/redaction.py, the
registered secrets and the token shapes), as every log line and result does.
"""

from __future__ import annotations

from flows.core.redaction import redact
from flows.core.scores import ScoresFile
from flows.core.watch_record import WatchSample

SAMPLES = 3  # responses kept in the record and the event: enough to see what changed
PROMPT_CHARS = 300
RESPONSE_CHARS = 600
CUT = " …"


def shortened(text: str, limit: int) -> str:
    """``text`` redacted, then cut to ``limit`` characters (the cut marked). Redacted first:
    a cut through a token would leave a piece the redactor no longer recognises."""
    clean = redact(text)
    return clean if len(clean) <= limit else clean[: limit - len(CUT)] + CUT


def sample_outputs(scores: ScoresFile, count: int = SAMPLES) -> list[WatchSample]:
    """The first ``count`` responses the program kept, each with its prompt and reward; from
    a program that kept none (one written before it kept responses), the prompts alone."""
    if scores.responses:
        return [WatchSample(prompt=shortened(r.question, PROMPT_CHARS),
                            response=shortened(r.response, RESPONSE_CHARS), reward=r.reward)
                for r in scores.responses[:count]]
    return [WatchSample(prompt=shortened(q, PROMPT_CHARS)) for q in scores.questions[:count]]
