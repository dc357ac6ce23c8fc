"""The serving canary's client: the evaluation's prompts sent to an OpenAI-compatible server
(vLLM, JetStream, tpu-inference) in place of the rollout, its answers handed back to
MaxText's ``evaluate`` to be scored by the training's reward functions.

Why ``/v1/completions`` and not ``/v1/chat/completions``: the prompts ``evaluate`` hands to the
rollout are already the training's data template and chat template applied (MaxText's
``process_data``), which is what the champion was scored on; a chat request would have the
server apply its own template on top, and the score would measure the template, not the
model. The request and response follow vLLM's protocol (vllm-project/vllm
``vllm/entrypoints/openai/protocol.py``: ``CompletionRequest`` takes ``model``, ``prompt``,
``max_tokens``, ``temperature``, ``top_p``, ``top_k``, ``n``; ``CompletionResponse`` holds
``choices`` of ``CompletionResponseChoice`` ``{index, text, finish_reason}``; an error is
``ErrorResponse {"error": {"message", "type", "param", "code"}}`` with the HTTP status).

The server is untrusted: only http and https; no redirect is followed (urllib would carry the
``Authorization`` header to wherever a redirect points); each request has a timeout; a body
over ``MAX_BODY`` bytes is refused unread; a choice's text is cut to ``MAX_TEXT`` characters;
429 and 503 are retried (``Retry-After`` honoured up to ``MAX_WAIT_S``) at most ``TRIES``
times. Anything else that is not a completion raises :class:`CanaryUnreachable` with a
reason that names the status and the server's own message (cut), never the key: the watch
records "unreachable", never a regression. Standard library only: it runs in the
post-training image beside evaluate_rl.py.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

API_KEY_ENV = "TPURL_CANARY_API_KEY"  # the key, when the profile names one (never an argument)
COMPLETIONS_PATH = "/v1/completions"
MAX_BODY = 1 << 20  # bytes of one answer: a few completions' text is far less
MAX_TEXT = 8000  # characters kept of one choice's text
MAX_MESSAGE = 200  # characters kept of a server's error message
TRIES = 3  # per prompt, for 429 and 503 (busy or starting)
MAX_WAIT_S = 30.0  # the longest Retry-After honoured
RETRIED = (429, 503)


class CanaryUnreachable(RuntimeError):
    """The server gave no usable completion: the canary is unscored, not regressed."""


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is an answer like any other non-200: followed, it would send the key on."""

    def redirect_request(self, req: Any, fp: Any, code: int, msg: str, headers: Any,
                         newurl: str) -> None:
        return None


def _cut(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 2] + " …"


def _server_message(body: bytes) -> str:
    """The server's own message from an ``ErrorResponse`` (else the body's start), cut."""
    text = body[:4096].decode("utf-8", "replace")
    try:
        data = json.loads(text)
    except ValueError:
        return _cut(text, MAX_MESSAGE)
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return _cut(error["message"], MAX_MESSAGE)
    if isinstance(data, dict) and isinstance(data.get("message"), str):  # older vLLM
        return _cut(data["message"], MAX_MESSAGE)
    return _cut(text, MAX_MESSAGE)


def _retry_after(value: str | None, attempt: int) -> float:
    """Seconds to wait before the next try: the server's Retry-After (seconds) up to
    MAX_WAIT_S, else 1, 2, 4 … seconds."""
    try:
        return min(max(float(value or ""), 0.0), MAX_WAIT_S)
    except ValueError:
        return min(float(2 ** attempt), MAX_WAIT_S)


@dataclass
class ServedCompletions:
    """One server, one model: ``complete`` returns the texts of ``n`` choices of a prompt."""

    endpoint: str  # the server's base URL: http(s)://HOST[:PORT][/PREFIX]
    model: str
    timeout_s: float
    api_key: str = ""
    sleep: Callable[[float], None] = time.sleep
    requests: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        parsed = urlparse(self.endpoint)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise CanaryUnreachable(f"{self.endpoint!r} is not an http(s) URL")
        self.url = self.endpoint.rstrip("/") + COMPLETIONS_PATH
        self._opener = urllib.request.build_opener(_NoRedirect())

    def complete(self, prompt: str, *, max_tokens: int, temperature: float,
                 top_p: float | None = None, top_k: int | None = None, n: int = 1) -> list[str]:
        body: dict[str, Any] = {"model": self.model, "prompt": prompt, "max_tokens": max_tokens,
                                "temperature": temperature, "n": n}
        if top_p is not None:
            body["top_p"] = top_p
        if top_k is not None and top_k > 0:
            body["top_k"] = top_k
        data = json.dumps(body).encode()
        for attempt in range(TRIES):
            status, headers, answer = self._post(data)
            if status == 200:
                return self._texts(answer, n)
            if status in RETRIED and attempt + 1 < TRIES:
                self.sleep(_retry_after(headers.get("Retry-After"), attempt))
                continue
            tried = f" after {TRIES} tries" if status in RETRIED else ""
            raise CanaryUnreachable(f"HTTP {status}{tried} from {self.url}: "
                                    f"{_server_message(answer)}")
        raise AssertionError("unreachable: the loop returns or raises")

    def _post(self, data: bytes) -> tuple[int, Any, bytes]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(self.url, data=data, headers=headers, method="POST")
        self.requests += 1
        try:
            with self._opener.open(request, timeout=self.timeout_s) as response:
                return response.status, response.headers, self._read(response)
        except urllib.error.HTTPError as exc:  # 3xx (not followed), 4xx, 5xx
            try:
                return exc.code, exc.headers, self._read(exc)
            finally:
                exc.close()
        except (TimeoutError, urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            if isinstance(reason, TimeoutError) or isinstance(exc, TimeoutError):
                raise CanaryUnreachable(f"no answer from {self.url} within "
                                        f"{self.timeout_s:g} s (watch.canary.timeout_s)") from None
            raise CanaryUnreachable(f"cannot reach {self.url}: "
                                    f"{_cut(str(reason), MAX_MESSAGE)}") from None

    def _read(self, response: Any) -> bytes:
        """The body, refused when it says or turns out to be over MAX_BODY bytes."""
        length = response.headers.get("Content-Length")
        if length and length.isdigit() and int(length) > MAX_BODY:
            raise CanaryUnreachable(f"{self.url} answered {int(length)} bytes, over the "
                                    f"{MAX_BODY}-byte limit of one answer")
        try:
            body: bytes = response.read(MAX_BODY + 1)
        except TimeoutError:
            raise CanaryUnreachable(f"no answer from {self.url} within {self.timeout_s:g} s "
                                    "(watch.canary.timeout_s)") from None
        if len(body) > MAX_BODY:
            raise CanaryUnreachable(f"{self.url} answered more than the {MAX_BODY}-byte "
                                    "limit of one answer")
        return body

    def _texts(self, answer: bytes, n: int) -> list[str]:
        """The choices' texts in index order (a CompletionResponse), each cut to MAX_TEXT."""
        try:
            data = json.loads(answer.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            raise CanaryUnreachable(f"{self.url} answered with a body that is not JSON: "
                                    f"{_cut(answer[:200].decode('utf-8', 'replace'), 80)}"
                                    ) from None
        choices = data.get("choices") if isinstance(data, dict) else None
        if not isinstance(choices, list) or len(choices) < n or not all(
                isinstance(c, dict) and isinstance(c.get("text"), str) for c in choices):
            raise CanaryUnreachable(f"{self.url} answered JSON that is not a completion with "
                                    f"{n} choice(s) of text (vLLM's CompletionResponse)")
        ordered = sorted(choices, key=lambda c: c.get("index", 0)
                         if isinstance(c.get("index"), int) else 0)
        return [c["text"][:MAX_TEXT] for c in ordered[:n]]


@dataclass(frozen=True)
class ServedOutput:
    """What ``evaluate`` reads of a rollout's output: ``.text``, one per prompt."""

    text: list[str]


def served_generate(client: ServedCompletions) -> Callable[..., ServedOutput]:
    """A rollout's ``generate(prompts, rollout_config)`` answered by the server: one request
    per prompt, the rollout config's length and sampling passed as the request's."""

    def generate(prompts: list[str], rollout_config: Any, **_: Any) -> ServedOutput:
        top_k = getattr(rollout_config, "top_k", None)
        top_p = getattr(rollout_config, "top_p", None)
        texts = [client.complete(str(p),
                                 max_tokens=int(rollout_config.max_tokens_to_generate),
                                 temperature=float(rollout_config.temperature),
                                 top_p=None if top_p is None else float(top_p),
                                 top_k=None if top_k is None else int(top_k))[0]
                 for p in prompts]
        return ServedOutput(text=texts)

    return generate
