"""The serving canary's client (images/rehearsal/served_completions.py), the part of the
evaluation program that asks the server, against a real HTTP server in this process that
speaks vLLM's OpenAI protocol and fails as a serving stack does (tests/support/openai_server.py).
Every failure is ``CanaryUnreachable`` with the status and the server's words, never a
regression and never the key; the limits hold at their value and refuse one past it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from tests.support.openai_server import openai_server

REHEARSAL = Path(__file__).parents[2] / "images" / "rehearsal"
KEY = "sk-canary-" + "k" * 24


def _program(name: str) -> ModuleType:
    """A program of the rehearsal image, imported as the evaluation program imports it (by
    its folder): standard library only at import time."""
    spec = importlib.util.spec_from_file_location(f"rehearsal_{name}", REHEARSAL / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


served = _program("served_completions")


def _client(url: str, model: str = "served-model", key: str = "",
            timeout: float = 5.0) -> tuple[Any, list[float]]:
    slept: list[float] = []
    return served.ServedCompletions(url, model, timeout, key, sleep=slept.append), slept


def _complete(client: Any, prompt: str = "<start>2+2?") -> list[str]:
    return client.complete(prompt, max_tokens=32, temperature=0.0, top_p=1.0, top_k=1)


def test_a_completion_sends_the_protocols_request_and_reads_its_choices() -> None:
    with openai_server(api_key=KEY, answer=lambda p: f"<answer>4</answer> to {p}") as server:
        client, _ = _client(server.url, key=KEY)
        assert _complete(client) == ["<answer>4</answer> to <start>2+2?"]
        assert client.complete("p", max_tokens=8, temperature=0.7, n=2) == [
            "<answer>4</answer> to p"] * 2
        first, second = server.requests()
    assert first.path == "/v1/completions"
    assert first.body == {"model": "served-model", "prompt": "<start>2+2?", "max_tokens": 32,
                          "temperature": 0.0, "top_p": 1.0, "top_k": 1, "n": 1}
    assert first.headers["Authorization"] == f"Bearer {KEY}"
    assert "top_k" not in second.body and "top_p" not in second.body  # unset: the server's


def test_the_served_rollout_answers_each_prompt_with_the_rollout_configs_sampling() -> None:
    config = SimpleNamespace(max_tokens_to_generate=16, temperature=0.5, top_p=0.9, top_k=0)
    with openai_server(answer=lambda p: p.upper()) as server:
        client, _ = _client(server.url)
        output = served.served_generate(client)(["a", "b"], rollout_config=config)
        assert output.text == ["A", "B"]
        bodies = [s.body for s in server.requests()]
    assert [b["prompt"] for b in bodies] == ["a", "b"]
    assert bodies[0]["max_tokens"] == 16 and bodies[0]["top_p"] == 0.9
    assert "top_k" not in bodies[0]  # 0: no top-k, as MaxText's greedy config says


@pytest.mark.parametrize("key", ["", "sk-wrong-" + "w" * 24])
def test_a_missing_or_wrong_key_is_unreachable_and_the_reason_never_holds_a_key(
        key: str) -> None:
    with openai_server(api_key=KEY) as server:
        client, _ = _client(server.url, key=key)
        with pytest.raises(served.CanaryUnreachable) as refused:
            _complete(client)
    reason = str(refused.value)
    assert reason.startswith(f"HTTP 401 from {server.url}/v1/completions") and "Unauthorized" in reason
    assert KEY not in reason and (not key or key not in reason)


def test_4xx_and_5xx_name_the_status_and_the_servers_own_message() -> None:
    with openai_server() as server:
        wrong, _ = _client(server.url, model="not-served")
        with pytest.raises(served.CanaryUnreachable, match=r"HTTP 404 .*The model `not-served` "
                                                           r"does not exist"):
            _complete(wrong)
        assert _complete(_client(server.url)[0])  # the fix: the model the server serves
        server.failures += ["500"]
        client, slept = _client(server.url)
        with pytest.raises(served.CanaryUnreachable, match=r"HTTP 500 from .*engine said 500"):
            _complete(client)
        assert slept == []  # a 500 is not retried: the engine failed, not busy


def test_429_and_503_are_retried_after_retry_after_and_three_are_unreachable() -> None:
    with openai_server() as server:
        server.retry_after = "7"
        server.failures += ["429", "503"]
        client, slept = _client(server.url)
        assert _complete(client) == ["echo: <start>2+2?"]  # the third try answers
        # the 429's Retry-After; the 503 says none: 2 s, the second try's back-off
        assert slept == [7.0, 2.0] and client.requests == 3
        server.failures += ["429", "429", "429"]
        server.retry_after = "3600"  # a server asking for an hour gets the cap
        client, slept = _client(server.url)
        with pytest.raises(served.CanaryUnreachable,
                           match=r"HTTP 429 after 3 tries .*Too many requests"):
            _complete(client)
        assert slept == [served.MAX_WAIT_S] * 2 and client.requests == 3


def test_a_slow_answer_past_the_timeout_is_unreachable_naming_the_field() -> None:
    with openai_server() as server:
        server.failures += ["slow"]
        server.slow_s = 1.0
        client, _ = _client(server.url, timeout=0.3)
        with pytest.raises(served.CanaryUnreachable,
                           match=r"within 0.3 s \(watch.canary.timeout_s\)"):
            _complete(client)
        server.failures += ["slow"]
        server.slow_s = 0.1
        assert _complete(_client(server.url, timeout=2.0)[0]) == ["echo: <start>2+2?"]


@pytest.mark.parametrize("failure", ["huge", "chunked"])
def test_a_body_over_the_limit_is_refused_and_one_at_the_limit_is_read(
        failure: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(served, "MAX_BODY", 4096)
    with openai_server() as server:
        server.huge_bytes = 4096 - 2 + 1  # "{" + spaces + "}": one byte over
        server.failures += [failure]
        client, _ = _client(server.url)
        with pytest.raises(served.CanaryUnreachable, match="4096-byte limit"):
            _complete(client)
        server.huge_bytes = 4096 - 2  # exactly the limit: read, then it is no completion
        server.failures += [failure]
        with pytest.raises(served.CanaryUnreachable, match="not a completion"):
            _complete(client)


def test_a_text_over_the_limit_is_cut_and_one_at_the_limit_is_whole(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(served, "MAX_TEXT", 10)
    with openai_server(answer=lambda p: p) as server:
        client, _ = _client(server.url)
        assert _complete(client, "x" * 10) == ["x" * 10]
        assert _complete(client, "y" * 11) == ["y" * 10]


def test_a_body_that_is_not_json_or_not_a_completion_is_unreachable() -> None:
    with openai_server() as server:
        server.failures += ["not-json"]
        client, _ = _client(server.url)
        with pytest.raises(served.CanaryUnreachable, match="not JSON: <html>502"):
            _complete(client)
        with pytest.raises(served.CanaryUnreachable, match="not a completion"):
            client._texts(b'{"choices": [{"index": 0, "text": 3}]}', 1)
        with pytest.raises(served.CanaryUnreachable, match="not a completion"):
            client._texts(b'[1, 2]', 1)


def test_a_redirect_is_not_followed_so_the_key_never_reaches_another_host() -> None:
    """The attack: the endpoint answers 302 to a host of the attacker's. urllib's default
    handler repeats the request there with the Authorization header (shown first, with that
    handler in the client's place); the client's own follows no redirect: the other host
    sees nothing."""
    import urllib.request

    with openai_server(api_key=KEY) as server, openai_server() as elsewhere:
        server.redirect_to = f"{elsewhere.url}/v1/completions"
        server.failures += ["redirect"]
        naive, _ = _client(server.url, key=KEY)
        naive._opener = urllib.request.build_opener()
        with pytest.raises(served.CanaryUnreachable):
            _complete(naive)
        assert [s.headers.get("Authorization") for s in elsewhere.requests()] == [
            f"Bearer {KEY}"]  # the key, handed to the other host
        elsewhere.seen.clear()
        server.failures += ["redirect"]
        client, _ = _client(server.url, key=KEY)
        with pytest.raises(served.CanaryUnreachable, match="HTTP 302"):
            _complete(client)
        assert elsewhere.requests() == []


def test_a_server_that_is_not_there_or_not_http_is_unreachable() -> None:
    with openai_server() as server:
        url = server.url
    client, _ = _client(url)  # closed: nothing listens there now
    with pytest.raises(served.CanaryUnreachable, match="cannot reach"):
        _complete(client)
    with pytest.raises(served.CanaryUnreachable, match="not an http"):
        served.ServedCompletions("file:///etc/passwd", "m", 1.0)


def test_the_program_sends_the_first_prompts_in_the_evaluations_batches() -> None:
    """evaluate_rl.first_prompts: whole batches while they fit, the last cut, nothing more."""
    evaluate_rl = _program("evaluate_rl")
    batches = [{"question": [f"q{i}", f"q{i + 1}"], "prompts": [f"p{i}", f"p{i + 1}"]}
               for i in (0, 2, 4)]
    for count, expected in ((2, ["q0", "q1"]), (3, ["q0", "q1", "q2"]),
                            (6, [f"q{i}" for i in range(6)]),
                            (7, [f"q{i}" for i in range(6)])):
        got = evaluate_rl.first_prompts(iter(batches), count)
        assert [q for b in got for q in b["question"]] == expected
        assert all(len(b["question"]) == len(b["prompts"]) for b in got)


def test_in_any_order_of_answers_only_a_busy_server_is_retried_and_three_tries_end_it() -> None:
    from hypothesis import given, settings
    from hypothesis import strategies as st

    with openai_server() as server:
        @settings(max_examples=60, deadline=None)
        @given(st.lists(st.sampled_from(["429", "503", "500", "ok"]), max_size=5))
        def check(answers: list[str]) -> None:
            server.failures[:] = list(answers)
            expected = "ok"
            for attempt, answer in enumerate([*answers, "ok"][:served.TRIES]):
                if answer == "ok" or answer == "500":
                    expected = answer
                    break
                if attempt + 1 == served.TRIES:
                    expected = "busy"
            client, slept = _client(server.url)
            if expected == "ok":
                assert _complete(client) == ["echo: <start>2+2?"]
            else:
                with pytest.raises(served.CanaryUnreachable) as refused:
                    _complete(client)
                assert (f"after {served.TRIES} tries" in str(refused.value)) == (
                    expected == "busy")
            assert len(slept) == client.requests - 1  # a wait before each try but the first
            assert client.requests <= served.TRIES

        check()
