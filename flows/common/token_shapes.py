"""What a credential looks like by itself, whoever holds it: the shapes the log redaction
blanks (flows/core/redaction.py) and the profile refuses to quote back
(flows/config/errors.py). One list for both, below config and core, which import each other
one way only (tests/test_import_graph.py)."""

from __future__ import annotations

import re

HF_TOKEN = re.compile(r"hf_[A-Za-z0-9]{20,}")  # a Hugging Face user access token
GOOGLE_ACCESS_TOKEN = re.compile(r"ya29\.[A-Za-z0-9._-]{20,}")  # an OAuth2 access token
# the same token upper-cased by a program; a digit is required, so a long
# upper-case constant such as HF_HUB_ENABLE_HF_TRANSFER is not taken for one
HF_TOKEN_UPPER = re.compile(r"HF_(?=[A-Z]*[0-9])[A-Z0-9]{20,}")
# a W&B API key of the current format (wandb_v1_ and 77 letters and digits); a legacy one is
# 40 hex digits, which a git commit is too, so only a registered value is blanked for those
WANDB_KEY = re.compile(r"wandb_v[0-9]+_[A-Za-z0-9]{20,}")
# what stands before the '@' of an http(s) address: a user and password, or a token as user
# (https://user:pass@host, http://token@host); the scheme and host stay readable
URL_USERINFO = re.compile(r"(?:(?<=http://)|(?<=https://))[^\s/@?#]+(?=@)", re.IGNORECASE)
# a query parameter named like a credential (?token=, &access_token=, ?api_key=, ?sig=):
# group 1, the name, is kept, the value blanked
URL_QUERY_SECRET = re.compile(
    r"(?i)([?&][\w.-]*(?:token|key|secret|passw(?:or)?d|pwd|sig|signature|auth|credential)"
    r"[\w.-]*=)[^&#\s'\"]+")
# Webhook URLs are the secret themselves (whoever has one can post): the host stays, the
# path that authorizes goes (Slack's and Discord's documented forms, Microsoft Teams').
SLACK_WEBHOOK = re.compile(r"(hooks\.slack\.com/(?:services|workflows|triggers)/)[A-Za-z0-9/_-]{8,}")
DISCORD_WEBHOOK = re.compile(r"(discord(?:app)?\.com/api/webhooks/)[A-Za-z0-9/_-]{8,}")
TEAMS_WEBHOOK = re.compile(r"(\.webhook\.office\.com/)[^\s\"'<>]{8,}")
# (marker, pattern): the marker is a cheap substring test before the expression; a pattern
# with a group keeps that group (the part that names what was blanked)
TOKEN_SHAPES = (("hf_", HF_TOKEN), ("HF_", HF_TOKEN_UPPER), ("ya29.", GOOGLE_ACCESS_TOKEN),
                ("wandb_v", WANDB_KEY),
                ("hooks.slack.com/", SLACK_WEBHOOK), ("/api/webhooks/", DISCORD_WEBHOOK),
                (".webhook.office.com/", TEAMS_WEBHOOK),
                ("@", URL_USERINFO), ("=", URL_QUERY_SECRET))

# What a program's output may put inside a token it prints: ANSI escape sequences (colour and
# cursor codes a terminal-aware logger inserts, ECMA-48 CSI and OSC), blanks and colons
# (groupings such as "hf_abcd efgh ..." or "hf:abcd:..."). Line breaks, a token wrapped over
# lines, are the redactor's to handle.
ANSI_ESCAPE = r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])"
SEPARATOR = re.compile(rf"(?:{ANSI_ESCAPE}|[ \t:])")
GAP = rf"(?:{ANSI_ESCAPE}|[ \t:])*"  # any separators, or none
_GAP1 = rf"(?:{ANSI_ESCAPE}|[ \t:])+"


def _split(prefix: str, joiner: str, body: str, longest: int) -> re.Pattern[str]:
    """``prefix``, ``joiner`` and a body of 20 to ``longest`` characters (then to the end of
    the piece it is in), with separators anywhere; the joiner may be replaced by one."""
    head = GAP.join(map(re.escape, prefix))
    return re.compile(rf"{head}(?:{GAP}{re.escape(joiner)}{GAP}|{_GAP1})"
                      rf"(?:{body}{GAP}){{19,{longest - 1}}}{body}+")


# The shapes above with separators inside: (marker, pattern, the same without separators,
# the body's longest length). The body is capped at the length the issuer gives (34 for a
# Hugging Face token), so the words after a token are not taken for more of it.
SPLIT_TOKEN_SHAPES = (
    ("hf", _split("hf", "_", "[A-Za-z0-9]", 34), re.compile(r"hf_?([A-Za-z0-9]{20,})"), 34),
    ("ya29", _split("ya29", ".", "[A-Za-z0-9._-]", 200),
     re.compile(r"ya29\.?([A-Za-z0-9._-]{20,})"), 200))
_TRAILING_ESCAPES = re.compile(rf"(?:{ANSI_ESCAPE})+$")


def starts_a_word(text: str, start: int) -> bool:
    """Whether ``text[start:]`` begins a word: escape codes before it do not count, so a
    token coloured from its first character is still one ("<ESC>[0mhf_...")."""
    if start == 0 or not text[start - 1].isalnum():
        return True
    before = text[max(0, start - 64):start]
    if "\x1b" not in before:
        return False
    return not _TRAILING_ESCAPES.sub("", before)[-1:].isalnum()


def random_looking(body: str) -> bool:
    """At least a fifth of ``body`` upper-case and a fifth lower-case letters: what a token
    drawn uniformly from letters and digits has but for a chance under 1 %, and English
    prose, lower-case with a few capitals, does not."""
    upper = sum(c.isupper() for c in body)
    lower = sum(c.islower() for c in body)
    return upper * 5 >= len(body) and lower * 5 >= len(body)


def token_like(split: str, marker: str) -> bool:
    """Whether a match of a SPLIT_TOKEN_SHAPES pattern is a token rather than prose.

    Split by escape codes alone it is the token shape as it stands. Split by blanks or
    colons it could be words ("hf_revision: main is not a commit of ..."), so it must look
    drawn at random (:func:`random_looking`)."""
    plain = re.sub(ANSI_ESCAPE, "", split)
    if not re.search(r"[ \t:]", plain):
        return True
    return random_looking(SEPARATOR.sub("", plain)[len(marker):].lstrip("_."))
