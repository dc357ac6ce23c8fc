"""The commands of the README and the docs pages as written: each fenced block under a
`<!-- readme: NAME ... -->` marker, read from the page it lives on, so a test runs exactly
what a reader copies. A page is named by its path under docs/ (``how-to/announce.md``) or
is the README itself (``README.md``)."""

from __future__ import annotations

import re
from pathlib import Path

from flows.common.paths import REPO_ROOT

README = REPO_ROOT / "README.md"
DOCS = REPO_ROOT / "docs"
_BLOCK = re.compile(r"<!-- readme: (?P<name>[\w-]+)[^>]*-->\s*\n```bash\n(?P<body>.*?)```", re.S)
_FENCE = re.compile(r"^```bash$", re.M)
_JSON_BLOCK = re.compile(r"<!-- readme: (?P<name>[\w-]+)[^>]*-->\s*\n```json\n(?P<body>.*?)```",
                         re.S)
_YAML_BLOCK = re.compile(r"<!-- readme: (?P<name>[\w-]+)[^>]*-->\s*\n```yaml\n(?P<body>.*?)```",
                         re.S)


def page(name: str) -> Path:
    """``README.md`` or a page under docs/, refused when it is not there (moved or renamed:
    the test must follow the text)."""
    path = README if name == "README.md" else DOCS / name
    assert path.is_file(), f"{name}: no such page (README.md or a path under docs/)"
    return path


def section(title: str, where: str = "README.md") -> str:
    """The text under the `## title` heading of the page, up to the next `## ` heading."""
    text = page(where).read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end != -1 else len(text)]


def blocks(where: str, title: str | None = None) -> dict[str, str]:
    """NAME -> the block's text, for the page (or one `## title` section of it). Every bash
    block there must carry a marker, so no command goes untested by accident."""
    body = page(where).read_text() if title is None else section(title, where)
    found = {m["name"]: m["body"] for m in _BLOCK.finditer(body)}
    assert len(found) == len(_FENCE.findall(body)), (
        f"a bash block of {where}{f' ({title})' if title else ''} has no marker")
    return found


def json_block(name: str, where: str) -> str:
    """The text of the ```json block under `<!-- readme: NAME -->` on the page: a body a
    reader sends as written (an API request's), so a test sends exactly that."""
    found = [m["body"] for m in _JSON_BLOCK.finditer(page(where).read_text())
             if m["name"] == name]
    assert len(found) == 1, f"{where} has {len(found)} json blocks marked {name!r}"
    return found[0]


def yaml_block(name: str, where: str) -> str:
    """The text of the ```yaml block under `<!-- readme: NAME -->` on the page: lines a
    reader pastes into a file as written, so a test reads exactly that."""
    found = [m["body"] for m in _YAML_BLOCK.finditer(page(where).read_text())
             if m["name"] == name]
    assert len(found) == 1, f"{where} has {len(found)} yaml blocks marked {name!r}"
    return found[0]


_PYTHON_BLOCK = re.compile(
    r"<!-- readme: (?P<name>[\w-]+)[^>]*-->\s*\n```python\n(?P<body>.*?)```", re.S)


def python_block(name: str, where: str) -> str:
    """The text of the ```python block under `<!-- readme: NAME -->` on the page: a file a
    reader saves as written, so a test saves exactly that."""
    found = [m["body"] for m in _PYTHON_BLOCK.finditer(page(where).read_text())
             if m["name"] == name]
    assert len(found) == 1, f"{where} has {len(found)} python blocks marked {name!r}"
    return found[0]


_TEXT_BLOCK = re.compile(r"<!-- readme: (?P<name>[\w-]+)[^>]*-->\s*\n```text\n(?P<body>.*?)```",
                         re.S)


def text_block(name: str, where: str) -> str:
    """The text of the ```text block under `<!-- readme: NAME -->` on the page: what a
    command prints, shown to a reader, so a test compares a real run's output with it."""
    found = [m["body"] for m in _TEXT_BLOCK.finditer(page(where).read_text())
             if m["name"] == name]
    assert len(found) == 1, f"{where} has {len(found)} text blocks marked {name!r}"
    return found[0]


def line_shape(line: str) -> re.Pattern[str]:
    """A printed line's shape: its words as written, any number where it has a number, any
    URI or path where it has one, either stage status and either promotion decision."""
    parts = re.split(r"(file://\S+|/\S+\.log|-?[+]?[\d][\d.,]*|\b(?:ran|skipped)\b"
                     r"|\b(?:rejected|promoted)\b)", line)
    pattern = ""
    for i, part in enumerate(parts):
        if i % 2 == 0:
            pattern += re.escape(part).replace("\\ ", " ")
        elif part.startswith(("file://", "/")):
            pattern += r"\S+"
        elif part in ("ran", "skipped"):
            pattern += "(?:ran|skipped)"
        elif part in ("rejected", "promoted"):
            pattern += "(?:rejected|promoted)"
        else:
            pattern += r"[-+]?[\d][\d.,]*(?:e[-+]?\d+)?"
    return re.compile(r"\s*".join(pattern.split(" ")) if "  " in line else pattern)


_HEREDOC = re.compile(r"^cat > (?P<file>\S+) <<'(?P<end>\w+)'\n(?P<body>.*?)^(?P=end)$", re.S | re.M)


def heredoc(name: str, where: str) -> tuple[str, str]:
    """(file, text) of the one ``cat > FILE <<'END'`` of the bash block under
    `<!-- readme: NAME -->`: a file the reader writes as the page shows it, so a test reads
    exactly what that command writes."""
    found = _HEREDOC.findall(blocks(where)[name])
    assert len(found) == 1, f"{where}: block {name!r} writes {len(found)} files with a heredoc"
    file, _end, body = found[0]
    return file, body
