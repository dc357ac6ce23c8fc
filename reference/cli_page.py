"""The CLI page, from `tpurl`'s own argparse parser (flows/cli.py)."""

from __future__ import annotations

import argparse

from flows.cli import _parser
from reference.markdown import cell, table


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _usage(name: str, command: argparse.ArgumentParser) -> str:
    # one line whatever the terminal's width (argparse wraps to $COLUMNS)
    return " ".join(command.format_usage().removeprefix("usage: ").split())


def _options(command: argparse.ArgumentParser) -> list[list[str]]:
    rows = []
    for action in command._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        name = ", ".join(action.option_strings) or action.dest.upper()
        if action.metavar and action.option_strings:
            name += f" {action.metavar}"
        rows.append([f"`{name}`", cell(action.help or "")])
    return rows


def render() -> str:
    parser = _parser()
    lines = ["# CLI: `tpurl`", "", "Generated from `flows/cli.py` by `python -m reference`;"
             " do not edit by hand.", "", "```text", (parser.description or "").strip(), "```", ""]
    for name, command in _subcommands(parser).items():
        lines += _section("##", f"tpurl {name}", command)
        for verb, nested in _subcommands(command).items():  # `tpurl announcements due|drop`
            lines += _section("###", f"tpurl {name} {verb}", nested)
    return "\n".join(lines)


def _section(level: str, title: str, command: argparse.ArgumentParser) -> list[str]:
    lines = [f"{level} `{title}`", "", cell(command.description or ""), "",
             "```text", _usage(title, command), "```", ""]
    options = _options(command)
    if options:
        lines += [*table(["argument", "what it does"], options), ""]
    return lines
