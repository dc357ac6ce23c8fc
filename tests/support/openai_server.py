"""A local HTTP server standing where a vLLM (or JetStream, tpu-inference) OpenAI-compatible
server would: no inference server runs on this machine, so this one answers
``POST /v1/completions`` the way vLLM's does, following vllm-project/vllm
``vllm/entrypoints/openai/protocol.py`` (read at 0052bed36509c7a5a2d8e48265334e40cf2f5a0e):

- a ``CompletionRequest`` body (``model``, ``prompt``, ``max_tokens``, ``temperature``,
  ``top_p``, ``top_k``, ``n``) answered by a ``CompletionResponse``: ``id``, ``object``
  ``text_completion``, ``created``, ``model``, ``choices`` of ``{index, text, logprobs,
  finish_reason, stop_reason}``, ``usage``;
- errors as ``ErrorResponse``: ``{"error": {"message", "type", "param", "code"}}`` with the
  HTTP status (a model it does not serve: 404 ``NotFoundError``; no prompt: 400
  ``BadRequestError``); with an API key set, a request without ``Authorization: Bearer KEY``
  gets 401 ``{"error": "Unauthorized"}`` as vLLM's ``--api-key`` middleware answers.

Besides, it fails the ways a serving stack does in front of vLLM, one scripted failure per
request from ``failures`` (then it answers normally): ``429`` with ``Retry-After`` (a
gateway's rate limit), ``503`` (starting or overloaded), ``500``, ``slow`` (answers after
``slow_s``), ``huge`` (a body of ``huge_bytes``, its Content-Length told), ``chunked`` (the
same body without a Content-Length), ``not-json``, ``redirect`` (302 to ``redirect_to``).
Every request is recorded (headers and body) for the tests to read.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


@dataclass
class OpenAIServer:
    url: str  # the base URL, as watch.canary.endpoint names it
    model: str
    answer: Callable[[str], str]  # prompt -> the completion's text
    api_key: str = ""
    failures: list[str] = field(default_factory=list)
    retry_after: str = "0"
    slow_s: float = 2.0
    huge_bytes: int = 2 << 20
    redirect_to: str = ""
    seen: list[Seen] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def requests(self) -> list[Seen]:
        with self.lock:
            return list(self.seen)


def _error(status: int, kind: str, message: str, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": param, "code": status}}


@contextlib.contextmanager
def openai_server(model: str = "served-model", answer: Callable[[str], str] | None = None,
                  api_key: str = "") -> Iterator[OpenAIServer]:
    state: OpenAIServer | None = None

    class Handler(BaseHTTPRequestHandler):
        def _send(self, status: int, data: bytes, headers: dict[str, str] | None = None,
                  length: bool = True) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            if length:
                self.send_header("Content-Length", str(len(data)))
            else:
                self.send_header("Connection", "close")
            self.end_headers()
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self.wfile.write(data)

        def _json(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
            self._send(status, json.dumps(body).encode(), headers)

        def do_POST(self) -> None:
            assert state is not None
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                body = {"unparsed": raw.decode(errors="replace")}
            with state.lock:
                state.seen.append(Seen(self.path, dict(self.headers.items()), body))
                failure = state.failures.pop(0) if state.failures else ""
            if state.api_key and self.headers.get("Authorization") != f"Bearer {state.api_key}":
                self._json(401, {"error": "Unauthorized"})
                return
            if failure == "429":
                self._json(429, _error(429, "RateLimitError", "Too many requests"),
                           {"Retry-After": state.retry_after})
                return
            if failure in ("503", "500"):
                status = int(failure)
                self._json(status, _error(status, "ServiceUnavailableError" if status == 503
                                          else "InternalServerError", f"engine said {status}"))
                return
            if failure == "slow":
                time.sleep(state.slow_s)
            if failure in ("huge", "chunked"):
                self._send(200, b"{" + b" " * state.huge_bytes + b"}",
                           length=failure == "huge")
                return
            if failure == "not-json":
                self._send(200, b"<html>502 Bad Gateway</html>")
                return
            if failure == "redirect":
                self._send(302, b"", {"Location": state.redirect_to})
                return
            if self.path != "/v1/completions":
                self._json(404, _error(404, "NotFoundError", "Not Found"))
                return
            if body.get("model") != state.model:
                self._json(404, _error(404, "NotFoundError",
                                       f"The model `{body.get('model')}` does not exist.",
                                       "model"))
                return
            prompt = body.get("prompt")
            if not isinstance(prompt, str):
                self._json(400, _error(400, "BadRequestError", "prompt is required", "prompt"))
                return
            n = int(body.get("n") or 1)
            text = state.answer(prompt)
            self._json(200, {
                "id": f"cmpl-{len(state.seen)}", "object": "text_completion",
                "created": int(time.time()), "model": state.model,
                "choices": [{"index": i, "text": text, "logprobs": None,
                             "finish_reason": "stop", "stop_reason": None}
                            for i in reversed(range(n))],  # the order is the index's, not the list's
                "usage": {"prompt_tokens": len(prompt.split()), "total_tokens": 0,
                          "completion_tokens": 0}})

        def do_GET(self) -> None:
            """Recorded (a redirected request arrives as a GET), then refused as FastAPI
            refuses a method a route does not take."""
            assert state is not None
            with state.lock:
                state.seen.append(Seen(self.path, dict(self.headers.items()), {}))
            self._json(405, {"detail": "Method Not Allowed"})

        def log_message(self, format: str, *args: Any) -> None:  # quiet in test output
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    state = OpenAIServer(url=f"http://127.0.0.1:{server.server_address[1]}", model=model,
                         answer=answer or (lambda prompt: f"echo: {prompt}"), api_key=api_key)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
