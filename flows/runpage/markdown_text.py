"""Untrusted text on the run page: what an announcement carries (a dataset URI, an event id)
reaches markdown artifacts, and the events endpoint that carries it has no authentication.
Escaped here, a value is shown as the text it is: no link, image, HTML or table cell can be
made of it (pure)."""

from __future__ import annotations

from urllib.parse import quote

# CommonMark lets any ASCII punctuation be backslash-escaped; these start markup inline or
# end a GFM table cell. <, > and & go as entities so no HTML is formed.
_ESCAPED = set("\\`*_{}[]()#+!|~:")
_ENTITIES = {"<": "&lt;", ">": "&gt;", "&": "&amp;"}


def md_text(value: str, in_link: bool = False) -> str:
    """One line of literal text, safe in a paragraph, a list item or a table cell. ':' is
    escaped too (so no bare https://… becomes a GFM autolink), except in a link's text,
    where no link can nest."""
    flat = " ".join(str(value).split())
    escaped = _ESCAPED - {":"} if in_link else _ESCAPED
    return "".join(_ENTITIES.get(c) or (f"\\{c}" if c in escaped else c) for c in flat)


def md_code(value: str) -> str:
    """A code span holding ``value`` literally (outside tables): its fence is longer than any
    run of backticks inside, so the value cannot close it."""
    flat = " ".join(str(value).split())
    longest, run = 0, 0
    for c in flat:
        run = run + 1 if c == "`" else 0
        longest = max(longest, run)
    fence = "`" * (longest + 1)
    pad = " " if flat.startswith("`") or flat.endswith("`") else ""
    return f"{fence}{pad}{flat}{pad}{fence}"


def md_link(text: str, url: str) -> str:
    """A link whose text is escaped and whose target cannot leave its parentheses."""
    return f"[{md_text(text, in_link=True)}]({quote(url, safe=':/?=&#%@+,;~')})"
