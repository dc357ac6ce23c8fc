"""The README's commands as written: each fenced bash block of a section, by the name in the
`<!-- readme: NAME ... -->` marker above it, so a test runs exactly what a reader copies."""

from __future__ import annotations

import re
from pathlib import Path

from flows.common.paths import REPO_ROOT

README = REPO_ROOT / "README.md"
_BLOCK = re.compile(r"<!-- readme: (?P<name>[\w-]+)[^>]*-->\s*\n```bash\n(?P<body>.*?)```", re.S)
_FENCE = re.compile(r"^```bash$", re.M)


def section(title: str, readme: Path = README) -> str:
    text = readme.read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end != -1 else len(text)]


def blocks(title: str, readme: Path = README) -> dict[str, str]:
    """NAME -> the block's text. Every bash block of the section must carry a marker, so no
    command there goes untested by accident."""
    body = section(title, readme)
    found = {m["name"]: m["body"] for m in _BLOCK.finditer(body)}
    assert len(found) == len(_FENCE.findall(body)), f"a bash block of '{title}' has no marker"
    return found


_JSON_BLOCK = re.compile(r"<!-- readme: (?P<name>[\w-]+)[^>]*-->\s*\n```json\n(?P<body>.*?)```",
                         re.S)


def json_block(name: str, readme: Path = README) -> str:
    """The text of the ```json block under `<!-- readme: NAME -->`: a body a reader sends
    as written (an API request's), so a test sends exactly that."""
    found = [m["body"] for m in _JSON_BLOCK.finditer(readme.read_text()) if m["name"] == name]
    assert len(found) == 1, f"README has {len(found)} json blocks marked {name!r}"
    return found[0]
