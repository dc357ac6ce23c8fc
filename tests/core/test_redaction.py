"""The process-wide redaction (flows/core/redaction.py) with the tokens users really have:
short ones, ones with regex metacharacters, ones with a trailing newline (a Secret made with
``kubectl create secret --from-file``), and in the forms programs print them: split over two
lines, JSON-escaped, Python repr, base64 inside a longer base64 text, URL-quoted; and log
records whose traceback (with its chained cause) quotes the token."""

from __future__ import annotations

import base64
import json
import logging
import random
import string
import urllib.parse

import pytest

from flows.config.profile import SecretRef
from flows.core.failures import internal_error
from flows.core.redaction import REDACTED, Redactor, forms, redact, register
from flows.core.secrets import resolve

_RNG = random.SystemRandom()


def _letters(n: int) -> str:
    return "".join(_RNG.choice(string.ascii_letters) for _ in range(n))


def _tokens() -> dict[str, str]:
    return {"hf": "hf_" + _letters(34), "eight": _letters(8),
            "metacharacters": "a.b*c+" + _letters(6) + "(d)[e]\\^$|?{2}",
            "newline": "hf_" + _letters(34) + "\n", "quote": 'p"w\'' + _letters(10)}


@pytest.mark.parametrize("kind", sorted(_tokens()))
def test_every_form_of_a_registered_value_is_redacted(kind: str) -> None:
    token = _tokens()[kind]
    register(token)
    bare = token.strip()
    prints = {
        "plain": f"token is {bare} here",
        "as given": f"value={token}",
        "json": json.dumps({"HF_TOKEN": token, "other": 1}),
        "repr": repr({"HF_TOKEN": token}),
        "base64": base64.b64encode(token.encode()).decode(),
        "base64 inside": base64.b64encode(f"HF_TOKEN={token}\nNEXT=1".encode()).decode(),
        "base64 after one byte": base64.b64encode(f"x{bare}yz".encode()).decode(),
        "url": "https://hub/api?token=" + urllib.parse.quote(token, safe=""),
        "form": "token=" + urllib.parse.quote_plus(bare),
    }
    for what, text in prints.items():
        clean = redact(text)
        assert bare not in clean, (what, clean)
        assert REDACTED in clean, (what, clean)
        assert not (forms(token) & {w for w in clean.split() if len(w) >= 8}), (what, clean)


def test_a_token_printed_over_two_lines_loses_both_pieces() -> None:
    token = "hf_" + _letters(34)
    register(token)
    for cut in (8, 17, len(token) - 8):
        text = f"{token[:cut]}\n  {token[cut:]} end"
        clean = redact(text)
        assert clean.replace("\n", "").replace(" ", "").find(token) == -1, clean
        assert all(token[cut - 8:cut] not in line and token[cut:cut + 8] not in line
                   for line in clean.split("\n")), clean
    # each line on its own, as the local backend and the log sink stream them
    assert redact(token[:20]) == REDACTED and redact(token[20:] + " end") == f"{REDACTED} end"


def test_ordinary_text_is_left_alone() -> None:
    register("hf_" + _letters(34))
    text = "step 10 loss=0.25 hf_access_token unset; sha256:abcdef0123 base_output_directory"
    assert redact(text) == text
    assert Redactor()("a" * 3) == "a" * 3


def test_values_shorter_than_four_characters_are_not_blanked_everywhere() -> None:
    register("ab")
    assert redact("abstract about tabs") == "abstract about tabs"


def test_resolving_a_reference_registers_its_value(monkeypatch: pytest.MonkeyPatch) -> None:
    token = "hf_" + _letters(34) + "\n"
    monkeypatch.setenv("TPURL_REDACTION_TEST_TOKEN", token)
    assert resolve(SecretRef(env="TPURL_REDACTION_TEST_TOKEN")) == token
    assert token.strip() not in Redactor()(f"401 for url ?token={token.strip()}")


def test_secret_named_variables_of_the_environment_are_redacted(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The local backend hands its environment to the programs: an HF_TOKEN the profile does
    not name still reaches them, and an `env` dump must not show it."""
    token, key = _letters(20), _letters(24)
    monkeypatch.setenv("HF_TOKEN", token)
    monkeypatch.setenv("PREFECT_API_KEY", key)
    redactor = Redactor()
    assert redactor(f"HF_TOKEN={token}\nPREFECT_API_KEY={key}") == \
        f"HF_TOKEN={REDACTED}\nPREFECT_API_KEY={REDACTED}"


def test_a_log_records_message_and_chained_traceback_are_redacted(
        caplog: pytest.LogCaptureFixture) -> None:
    token = "hf_" + _letters(34)
    Redactor().add(token)
    logger = logging.getLogger("tpurl-redaction-test")
    try:
        try:
            raise RuntimeError(f"401 Client Error for url: https://hub/?token={token}")
        except RuntimeError as exc:
            raise internal_error("convert", exc, redact) from exc
    except Exception:
        with caplog.at_level(logging.INFO):
            logger.exception("Task run failed with exception: %r", {"t": token})
            logger.info("token %s and %s", token, f"{token[:9]}")
    text = "\n".join(caplog.handler.format(r) for r in caplog.records)
    assert token in str(RuntimeError(token))  # (the source held it)
    assert token not in text and "401 Client Error" in text and "Traceback" in text, text


def test_the_registry_credential_and_its_basic_header_are_redacted() -> None:
    """The Google access token the image stage hands Artifact Registry, as the header
    docker-py, urllib or an HTTP error's repr would show it."""
    from flows.backends.gke.image.registry_http import RegistryApi

    access_token = "ya29." + _letters(40)
    header = RegistryApi(lambda: access_token)._authorization('Basic realm="x"', "p/i")
    clean = redact(f"request headers: {{'Authorization': '{header}'}} token={access_token}")
    assert access_token not in clean and header.split()[1] not in clean, clean


def test_a_token_wrapped_over_three_or_more_lines_loses_every_piece() -> None:
    """Every line of a token wrapped over three or more (13, 9 or 5 characters a line) is
    redacted, the middle ones too, whether the lines come one by one or in one text."""
    token = "hf_" + _letters(34)
    register(token)
    for width in (13, 9, 5):  # 5: pieces shorter than a fragment, caught in the whole text
        lines = [token[i:i + width] for i in range(0, len(token), width)]
        whole = redact("printed: \n" + "\n    ".join(lines) + "\nafter")
        assert whole.count("\n") == len(lines) + 1  # the line structure stays
        for i in range(0, len(token) - 4):
            assert token[i:i + 5] not in whole, (width, whole)
        assert whole.endswith("\nafter") and whole.startswith("printed: \n")
        if width >= 8:  # line by line, as the local backend streams them
            assert all(token[i:i + 8] not in redact(f"[train] {line}")
                       for line in lines for i in range(len(token) - 8)), lines


def test_hex_unicode_escaped_and_case_changed_forms_are_redacted() -> None:
    token = "hf_" + _letters(34)
    register(token)
    for shown in (token.encode().hex(), token.encode().hex().upper(), token.upper(),
                  token.lower(), "".join(f"\\u{ord(c):04x}" for c in token),
                  "".join(f"\\u{ord(c):04X}" for c in token)):
        assert redact(f"value={shown};") == f"value={REDACTED};", shown
    # an upper-cased token never registered (another process's) is caught by its shape
    stray = ("hf_" + _letters(30) + "7").upper()
    assert stray not in redact(f"HF={stray}")


def test_the_new_forms_leave_ordinary_words_alone() -> None:
    register("hf_" + _letters(34))
    text = ("HF_HUB_ENABLE_HF_TRANSFER=1 HF_HUB_DISABLE_TELEMETRY checkpoint_period "
            "0123456789abcdef \\u0041\\u0042 deadbeefcafe1234 STEP_TIME_SECONDS learning_rate")
    assert redact(text) == text
    assert redact("line one\nline two\n  indented three") == "line one\nline two\n  indented three"
