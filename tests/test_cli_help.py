"""Every `tpurl` subcommand, nested ones too, describes itself and each of its arguments (the
CLI reference is generated from these texts), and `tpurl --version` is the project's version,
whose changes CHANGELOG.md describes first."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tomllib

from flows.cli import _parser
from flows.common.paths import REPO_ROOT


def _commands(parser: argparse.ArgumentParser, prefix: str = "tpurl"
              ) -> list[tuple[str, argparse.ArgumentParser]]:
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, command in action.choices.items():
                found.append((f"{prefix} {name}", command))
                found += _commands(command, f"{prefix} {name}")
    return found


def test_every_subcommand_and_argument_says_what_it_is_for() -> None:
    commands = _commands(_parser())
    assert {"tpurl check", "tpurl announcements due", "tpurl announcements drop"} <= {
        name for name, _ in commands}
    for name, command in commands:
        assert len(command.description or "") > 15, name
        for action in command._actions:
            if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
                continue
            assert action.help, (name, action.dest)


def test_the_version_is_the_projects_and_the_changelog_describes_it_first() -> None:
    version = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["version"]
    done = subprocess.run([sys.executable, "-c", "from flows.cli import main; main()",
                           "--version"], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout.strip()) == (0, f"tpurl {version}"), done.stderr
    changelog = (REPO_ROOT / "CHANGELOG.md").read_text()
    first = re.search(r"^## (\S+) \(", changelog, re.M)
    assert first is not None and first[1] == version, (
        "CHANGELOG.md's first entry must be the version pyproject.toml sets")
