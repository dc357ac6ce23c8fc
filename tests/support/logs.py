"""A logger stand-in that keeps what it was told, for asserting on messages."""

from __future__ import annotations


class Log:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def info(self, msg: str, *args: object) -> None:
        self.lines.append(msg % args if args else msg)

    def warning(self, msg: str, *args: object) -> None:
        self.lines.append("WARNING " + (msg % args if args else msg))
