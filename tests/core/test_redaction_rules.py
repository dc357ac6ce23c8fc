"""flows/core/redaction.py's rules one by one (tests/core/test_redaction.py covers the
forms as programs print them): the length bounds, the forms and their order, the line-by-line
pass over pieces of a split token, and log records."""

from __future__ import annotations

import base64
import json
import logging
import random
import string
import traceback

import pytest

from flows.core.redaction import REDACTED, forms, redact, register, register_environment

_RNG = random.SystemRandom()


def letters(n: int) -> str:
    return "".join(_RNG.choice(string.ascii_letters) for _ in range(n))


@pytest.fixture
def token() -> str:
    value = letters(30)
    register(value)
    return value


def test_values_of_four_characters_and_more_have_forms():
    assert forms("abc") == set()
    assert " abc " in forms(" abc ") and "abc" not in forms(" abc ")
    assert "abcd" in forms("abcd") and "abcd" in forms("abcd\n")


def test_the_forms_include_each_escaping_and_case():
    value = "Ab'C\"d1234é"
    found = forms(value)
    assert json.dumps(value)[1:-1] in found and repr(value)[1:-1] in found
    assert value.lower() in found and value.upper() in found
    assert value.encode().hex() in found and value.encode().hex().upper() in found
    whole = base64.b64encode(value.encode()).decode()
    assert whole in found
    short = "abcde"  # base64 YWJjZGU=: the form without padding too
    assert "YWJjZGU" in forms(short) and "YWJjZGU=" in forms(short)


def test_base64_inside_a_longer_encoding_is_caught_at_every_offset(token: str):
    for offset in (0, 1, 2):
        blob = base64.b64encode(b"x" * offset + token.encode() + b"tail").decode()
        assert REDACTED in redact(blob), offset


def test_a_longer_value_is_replaced_before_a_shorter_one_inside_it():
    # the longer one does not start with the shorter (nor sort after it by its letters)
    short = "b" + letters(9)
    longer = "A" + short + letters(6)
    register(short)
    register(longer)
    assert redact(f"a {longer} b") == f"a {REDACTED} b"
    assert redact(f"a {longer}") == f"a {REDACTED}"  # line by line too


def test_secret_named_variables_are_registered_others_not():
    secret, plain = letters(20), letters(20)
    register_environment({"MY_API_KEY": secret, "HOME_DIR": plain, "EMPTY_TOKEN": ""})
    assert redact(f"{secret} {plain}") == f"{REDACTED} {plain}"


def test_token_shapes_are_blanked_keeping_the_header_before_a_bearer():
    body = letters(24)
    assert redact(f"Authorization: Bearer {body}") == f"Authorization: Bearer {REDACTED}"
    assert redact(f"authorization: bearer {body}!") == f"authorization: bearer {REDACTED}!"
    assert redact("hf_" + body) == REDACTED
    assert redact("x HF_" + body.upper() + "9 y") == f"x {REDACTED} y"


@pytest.mark.parametrize("size", [8, 12, 29])
def test_a_line_ending_with_the_tokens_start_loses_it(token: str, size: int):
    # glued to a word ("=" is a token character), so no whole-word pass can see the piece
    assert redact("key: " + token[:size]) == f"key: {REDACTED}"
    assert redact("key=" + token[:size]) == f"key={REDACTED}"


@pytest.mark.parametrize("size", [8, 12, 29])
def test_a_line_starting_with_the_tokens_end_loses_it_keeping_its_indent(token: str, size: int):
    assert redact("    " + token[-size:] + " rest") == f"    {REDACTED} rest"
    assert redact("    " + token[-size:] + "=rest") == f"    {REDACTED}=rest"
    assert redact(token[-size:] + "=rest  ") == f"{REDACTED}=rest  "


def test_a_middle_piece_of_the_token_is_blanked_and_ordinary_lines_stay(token: str):
    assert redact("a " + token[10:20] + " b") == f"a {REDACTED} b"
    for line in ("short", "ordinary words in a line", token[:7], "   " + token[-7:]):
        assert redact(line) == line


def test_a_token_wrapped_in_a_text_keeps_the_texts_lines(token: str):
    """Pieces shorter than 8 are caught in a text holding all the lines (the indent the wrap
    added goes with the token)."""
    text = "start " + token[:5] + "\n  " + token[5:11] + "\n" + token[11:] + " end"
    assert redact(text) == f"start {REDACTED}\n{REDACTED}\n{REDACTED} end"


def test_a_log_record_loses_the_token_in_its_message_and_traceback(token: str,
                                                                    caplog: pytest.LogCaptureFixture):
    logger = logging.getLogger("tests.redaction_rules")
    with caplog.at_level(logging.INFO, logger="tests.redaction_rules"):
        logger.info("clean %s", "words")
        logger.info("value %s here", token)
        try:
            raise ValueError(f"bad {token}")
        except ValueError as exc:
            logger.error("failed", exc_info=True)
            expected = "".join(traceback.format_exception(exc)).rstrip("\n").replace(
                token, REDACTED)
    # only this logger's: another thread's warnings may land in the capture too
    clean, secret, failed = [r for r in caplog.records if r.name == "tests.redaction_rules"]
    assert (clean.msg, clean.args) == ("clean %s", ("words",))
    assert (secret.msg, secret.args) == (f"value {REDACTED} here", None)
    assert failed.exc_text == expected and token not in caplog.text
