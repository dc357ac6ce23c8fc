"""The few Markdown shapes the reference pages are made of."""

from __future__ import annotations


def cell(text: str) -> str:
    """One table cell: a single line, pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines
