"""A token with separators inside it (flows/core/redaction.py ``_redact_separated``): ANSI
escape codes, blanks or colons at any positions, the joiner itself replaced by one. Whatever
the positions, the text that reaches a log, an exception's message or the support bundle
never gives the token's secret part back by stripping the separators; ordinary log text
(field names with colons, coloured levels, times, "capacity") is left alone."""

from __future__ import annotations

import logging
import string

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from flows.common.token_shapes import SEPARATOR
from flows.core.error_redaction import redact_exception
from flows.core.redaction import install_log_redaction, redact, register
from flows.operations.support_bundle import Bundle

SEPARATORS = ("\x1b[0m", "\x1b[1;31m", "\x1b[38;5;208m", "\x1b]8;;https://x\x07", " ", "  ",
              "\t", ":", " : ")
BEFORE = ("", "token ", "HfHubHTTPError: 401 for ", "export HF_TOKEN=", "[", "capacity 8; ")
AFTER = ("", " was refused", ".", "]", " (capacity 8 chips)", "\n")
SINKS = ("redact", "log", "exception", "bundle")


class _Kept(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def through(sink: str, text: str) -> str:
    """``text`` as it leaves by ``sink``: redacted by the pass that sink goes through."""
    if sink == "redact":
        return redact(text)
    if sink == "log":  # the log-record factory every handler reads from (as Redactor() installs)
        install_log_redaction()
        kept, logger = _Kept(), logging.getLogger("tpurl.test.separated")
        logger.addHandler(kept)
        try:
            logger.warning("program said: %s", text)
        finally:
            logger.removeHandler(kept)
        return kept.messages[0]
    if sink == "exception":
        return str(redact_exception(RuntimeError(text)))
    bundle = Bundle(redact)
    bundle.text("logs/stages/x.log", text)
    return bundle.files["logs/stages/x.log"]


def separated(token: str, cuts: list[tuple[int, str]]) -> str:
    """``token`` with each separator inserted before the token's character at its index
    (the end for ``len(token)``): between characters, never inside another separator."""
    before: dict[int, str] = {}
    for index, separator in cuts:
        at = index % (len(token) + 1)
        before[at] = before.get(at, "") + separator
    return "".join(before.get(i, "") + c for i, c in enumerate(token)) + before.get(len(token), "")


def uncovered(shown: str, secret: str) -> bool:
    return secret in SEPARATOR.sub("", shown)


cuts = st.lists(st.tuples(st.integers(0, 200), st.sampled_from(SEPARATORS)), min_size=1,
                max_size=12)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(body=st.text(string.ascii_letters + string.digits, min_size=34, max_size=34),
       joiner=st.sampled_from(["_", ":", "_:"]), cuts=cuts, before=st.sampled_from(BEFORE),
       after=st.sampled_from(AFTER), sink=st.sampled_from(SINKS))
def test_a_token_shape_split_anywhere_is_never_recoverable(body: str, joiner: str,
                                                           cuts: list[tuple[int, str]],
                                                           before: str, after: str,
                                                           sink: str) -> None:
    """Tokens of another process (never registered): caught by their shape. A hub token
    is drawn uniformly from letters and digits; a draw with under a fifth upper- or
    lower-case letters (under 1 % of them) is one prose could make too, so it is left out
    of what the shape promises (flows/common/token_shapes.py ``token_like``)."""
    assume(sum(c.isupper() for c in body) * 5 >= 34 and sum(c.islower() for c in body) * 5 >= 34)
    token = "hf" + joiner + body
    shown = through(sink, before + separated(token, cuts) + after)
    assert not uncovered(shown, body), repr(shown)


@settings(max_examples=120, deadline=None)
@given(secret=st.text(string.ascii_letters + string.digits + "-_.", min_size=12, max_size=48),
       cuts=cuts, before=st.sampled_from(BEFORE), after=st.sampled_from(AFTER),
       sink=st.sampled_from(SINKS))
def test_a_registered_secret_split_anywhere_is_never_recoverable(
        secret: str, cuts: list[tuple[int, str]], before: str, after: str, sink: str) -> None:
    """Values the profile references (a W&B key, an MLflow token, a webhook URL), whatever
    their shape: registered when resolved, caught with separators anywhere."""
    assume(len(set(secret)) >= 6)  # a real credential, not a run of one character
    register(secret)
    shown = through(sink, before + separated(secret, cuts) + after)
    assert not uncovered(shown, secret), repr(shown)


ORDINARY = (
    "capacity: 8 chips in us-east5-b; capacity-fallback to flex-start",
    "model.hf_revision: main is not a commit of Qwen Qwen3 0 6B; fix: give the full commit",
    "hf_hub: Repository Not Found for url: https://huggingface.co/api/models/Qwen/x",
    "\x1b[32mINFO\x1b[0m 12:30:45 | step 10 loss=0.25 hf_access_token unset",
    "HfHubHTTPError: 401 Client Error: Unauthorized for url (check HF_TOKEN: env HF_TOKEN)",
    "checkpoint_period: 10; max_target_length: 1024; hf_revision: 0123456789abcdef",
    "tpurl-logs/train-grpo.log: Traceback (most recent call last): File x.py, line 12",
    "the hf cache directory is full now: free space under ~/.cache/huggingface/hub",
    "ya29 scopes: cloud-platform, userinfo email; token refresh in 3599 s",
)


def test_ordinary_log_text_is_left_alone() -> None:
    register("hf_" + "Ab1" * 11 + "C")
    for line in ORDINARY:
        for sink in SINKS:
            assert through(sink, line).endswith(line), (sink, line)
