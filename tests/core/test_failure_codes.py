"""The failure catalogue (flows/core/failure_codes.py) against the code: one entry for every
code the package sets and none for a code set nowhere, and advice that names only profile
fields and `tpurl` commands that exist. The how-to pages written beside it are held to the
same names."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from flows.cli import _parser
from flows.common.paths import REPO_ROOT
from flows.config import Profile
from flows.core.failure_codes import CATALOGUE, by_code
from flows.reference import cli_page, failures_page, profile_page, troubleshooting_page

FIELDS = {row.path: row.type for row in profile_page.rows()}
SECTIONS = sorted(name for name in Profile.model_fields if any(
    path.startswith(f"{name}.") for path in FIELDS))
_FIELD_TOKEN = re.compile(r"\b(?:" + "|".join(SECTIONS) + r")\.[A-Za-z_<][\w.<>-]*")
_COMMAND = re.compile(r"`tpurl ([a-z][a-z-]*)")  # a command is written as code
COMMANDS = set(cli_page._subcommands(_parser()))
HOW_TO = [REPO_ROOT / "docs" / "how-to" / name for name in (
    "rotate-secrets.md", "preemption-cost.md", "month-cost.md", "support-bundle.md")]


def _resolves(path: str) -> bool:
    """A profile field, or a key below a field that is a map (``train.args.X``,
    ``gke.max_usd_per_stage.train``, ``image.disabled_patches.<id>``)."""
    if path in FIELDS:
        return True
    parts = path.split(".")
    return any(FIELDS.get(".".join(parts[:n]), "").startswith("dict[")
               for n in range(1, len(parts)))


def unknown_fields(text: str) -> list[str]:
    """The field-shaped names in ``text`` (``gke.xxx``, ``train.args.yyy``) that name no
    profile field."""
    tokens = (token.rstrip(".-") for token in _FIELD_TOKEN.findall(text))
    return [token for token in tokens if not _resolves(token)]


def unknown_commands(text: str) -> list[str]:
    """The commands written as code (`` `tpurl WORD ...` ``) in ``text`` whose WORD is no
    subcommand of the CLI's parser (a quoted message may say "tpurl" as a name)."""
    return [word for word in _COMMAND.findall(text) if word not in COMMANDS]


def test_every_code_set_in_the_package_has_an_entry() -> None:
    missing = sorted(set(failures_page.all_codes()) - set(by_code()))
    assert missing == [], (f"codes without an entry in flows/core/failure_codes.py: {missing}; "
                           "add what the user sees and what to do")


def test_every_entry_is_a_code_the_package_sets() -> None:
    stale = sorted(set(by_code()) - set(failures_page.all_codes()))
    assert stale == [], f"entries for codes set nowhere in flows/: {stale}; remove them"


def test_one_entry_per_code_and_one_anchor_per_entry() -> None:
    codes = [entry.code for entry in CATALOGUE]
    anchors = [entry.anchor for entry in CATALOGUE]
    assert len(codes) == len(set(codes)) and len(anchors) == len(set(anchors))


def test_every_entry_names_only_fields_and_commands_that_exist() -> None:
    empty = [entry.code for entry in CATALOGUE if not (entry.see.strip() and entry.do.strip())]
    wrong = {entry.code: unknown_fields(f"{entry.see}\n{entry.do}")
             + unknown_commands(f"{entry.see}\n{entry.do}") for entry in CATALOGUE}
    assert empty == []
    assert {code: names for code, names in wrong.items() if names} == {}, (
        "entries naming profile fields or tpurl commands that do not exist")


def test_the_checks_catch_a_field_or_command_that_does_not_exist() -> None:
    text = ("raise `gke.no_such_budget_s` or train.args.anything, set gke.max_usd_per_stage."
            "train, then `tpurl frobnicate PROFILE` or `tpurl plan --check`.")
    assert unknown_fields(text) == ["gke.no_such_budget_s"]
    assert unknown_commands(text) == ["frobnicate"]


def test_the_failures_reference_links_each_code_to_its_entry() -> None:
    page = (failures_page.REPO_ROOT / "docs" / "reference" / "failures.md").read_text()
    troubleshooting = troubleshooting_page.render()
    for entry in CATALOGUE:
        assert f"troubleshooting.md#{entry.anchor})" in page, entry.code
        assert f"### `{entry.code}` {{#{entry.anchor}}}" in troubleshooting, entry.code


@pytest.mark.parametrize("page", HOW_TO, ids=lambda page: page.name)
def test_the_how_to_pages_name_only_fields_and_commands_that_exist(page: Path) -> None:
    text = page.read_text()
    assert unknown_fields(text) == [], f"{page.name} names profile fields that do not exist"
    assert unknown_commands(text) == [], f"{page.name} names tpurl commands that do not exist"


def test_the_catalogue_and_the_pages_that_describe_codes_do_not_count_as_setting_them(
        tmp_path: Path) -> None:
    package = tmp_path / "flows"
    for module, code in (("core/failure_codes.py", "gke/described"),
                         ("reference/troubleshooting_page.py", "gke/linked"),
                         ("backends/x.py", "gke/set-here")):
        (package / module).parent.mkdir(parents=True, exist_ok=True)
        (package / module).write_text(f'CODE = "{code}"\n')
    assert set(failures_page.codes_in(package)) == {"gke/set-here"}
