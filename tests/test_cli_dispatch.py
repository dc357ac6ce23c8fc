"""`tpurl`'s parser names the function each subcommand runs (argparse's ``set_defaults``), so
``cli.main`` is one call whatever the command: a subcommand added without one fails here,
not at a user's first use of it."""

from __future__ import annotations

import pytest

from flows import cli
from reference.cli_page import _subcommands


def test_every_subcommand_names_the_function_that_runs_it() -> None:
    commands = _subcommands(cli._parser())
    assert commands
    missing = sorted(name for name, parser in commands.items()
                     if not callable(parser.get_default("func")))
    assert missing == []


@pytest.mark.parametrize("argv", [["profiles"], ["validate", "smoke-qwen3-0.6b-v6e-8"],
                                  ["announcements", "due", "rl-post-training/retrain"]])
def test_the_parsed_arguments_carry_their_command(argv: list[str]) -> None:
    assert callable(cli._parser().parse_args(argv).func)


@pytest.mark.parametrize("argv", [
    ["rollback", "rehearsal", "--reason", "r"], ["promote", "rehearsal", "--clear", "run-1",
                                                 "--reason", "r"], ["watch", "rehearsal"],
    ["validate", "rehearsal"]])
def test_a_malformed_override_exits_2_naming_it_before_the_command_runs(
        argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([*argv, "--set", "nokey"]) == 2
    assert "--set nokey: has no '='" in capsys.readouterr().err
