"""The failure codes (the enum `Failure`, flows/common/failure_codes.py) against the code that
raises them: no code is a string at a raise site, every member is raised somewhere and with
the categories it declares, and each fix and symptom names only profile fields and `tpurl`
commands that exist. The how-to pages written beside them are held to the same names."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from flows.cli import _parser
from flows.common.failure_codes import Failure, FailureCategory
from flows.common.paths import REPO_ROOT
from flows.config import Profile
from flows.core.failures import STORAGE_ERRNOS
from reference import cli_page, failures_page, profile_page, troubleshooting_page
from reference.symptoms import SEEN, anchor

FIELDS = {row.path: row.type for row in profile_page.rows()}
SECTIONS = sorted(name for name in Profile.model_fields if any(
    path.startswith(f"{name}.") for path in FIELDS))
# a field starts a name: flows.backends.gke.flow_pools is a module, not the field gke.flow_pools
_FIELD_TOKEN = re.compile(r"(?<![\w./])(?:" + "|".join(SECTIONS) + r")\.[A-Za-z_<][\w.<>-]*")
_COMMAND = re.compile(r"`tpurl ([a-z][a-z-]*)")  # a command is written as code
COMMANDS = set(cli_page._subcommands(_parser()))
HOW_TO = [REPO_ROOT / "docs" / "how-to" / name for name in (
    "rotate-secrets.md", "preemption-cost.md", "month-cost.md", "support-bundle.md")]
_AREAS = {code.split("/")[0] for code in Failure}
# the helpers that build a stage failure of one category, and the category they give
_HELPERS = {"user_error": FailureCategory.USER_ERROR,
            "infrastructure": FailureCategory.INFRASTRUCTURE}


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


def code_strings(package: Path) -> list[str]:
    """``module:line code`` for every string literal in the package shaped like a failure
    code (``area/name`` of a known area), outside the enum's own module."""
    found = []
    for path in sorted(package.rglob("*.py")):
        if path.relative_to(package).as_posix() == "common/failure_codes.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                    and re.fullmatch(r"([a-z]+)/[A-Za-z0-9-]+", node.value)
                    and node.value.split("/")[0] in _AREAS):
                found.append(f"{path.relative_to(package.parent)}:{node.lineno} {node.value}")
    return found


def _named(node: ast.AST) -> Failure | None:
    if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
            and node.value.id == "Failure" and node.attr in Failure.__members__):
        return Failure[node.attr]
    return None


def raised_categories(package: Path) -> list[tuple[str, FailureCategory, Failure]]:
    """``(where, category, code)`` for each stage failure built in one call with both a
    category and a code (``user_error``/``infrastructure`` with a code, ``Diagnosis(
    FailureCategory.X, ..., Failure.Y)``), and each error class that declares both
    (``failure_category = FailureCategory.X`` and ``code = Failure.Y``)."""
    found = []
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                declared = {target.id: statement.value for statement in node.body
                            if isinstance(statement, ast.Assign | ast.AnnAssign)
                            for target in ([statement.target] if isinstance(statement, ast.AnnAssign)
                                           else statement.targets)
                            if isinstance(target, ast.Name) and statement.value is not None}
                code, kind = _named(declared.get("code", ast.Pass())), declared.get("failure_category")
                if code is not None and isinstance(kind, ast.Attribute):
                    found.append((f"{path.name}:{node.lineno}", FailureCategory[kind.attr], code))
            if not isinstance(node, ast.Call):
                continue
            name = getattr(node.func, "id", getattr(node.func, "attr", ""))
            codes = [c for c in (_named(a) for a in [*node.args, *(k.value for k in node.keywords)])
                     if c is not None]
            category = _HELPERS.get(name)
            if name == "Diagnosis" and node.args and isinstance(node.args[0], ast.Attribute):
                category = FailureCategory.__members__.get(node.args[0].attr)
            if category is not None and len(codes) == 1:
                found.append((f"{path.name}:{node.lineno}", category, codes[0]))
    return found


def test_no_code_is_a_string_in_the_package() -> None:
    assert code_strings(failures_page.PACKAGE) == [], (
        "write a failure code as a member of Failure (flows/common/failure_codes.py)")


def test_every_code_is_raised_somewhere() -> None:
    stale = sorted(set(Failure) - set(failures_page.codes_in()))
    assert stale == [], f"codes raised nowhere in flows/: {stale}; remove them"


def test_each_code_is_raised_with_a_category_it_declares() -> None:
    sites = raised_categories(failures_page.PACKAGE)
    assert len(sites) >= 20  # the scan finds the raise sites at all
    wrong = [f"{where}: {code} as {category}" for where, category, code in sites
             if category not in code.categories]
    assert wrong == [], "add the category to the member's categories, or correct the raise"


def test_every_code_has_its_symptom_and_one_anchor() -> None:
    assert set(SEEN) == set(Failure)
    assert len({anchor(code) for code in Failure}) == len(Failure)


def test_every_fix_and_symptom_names_only_fields_and_commands_that_exist() -> None:
    texts = {code: f"{SEEN[code][1]}{SEEN[code][2]}\n{code.fix}" for code in Failure}
    assert [code for code in Failure if not (code.fix.strip() and SEEN[code][2].strip())] == []
    wrong = {code: unknown_fields(text) + unknown_commands(text) for code, text in texts.items()}
    assert {code: names for code, names in wrong.items() if names} == {}, (
        "codes naming profile fields or tpurl commands that do not exist")


def test_the_checks_catch_a_field_or_command_that_does_not_exist() -> None:
    text = ("raise `gke.no_such_budget_s` or train.args.anything, set gke.max_usd_per_stage."
            "train, then `tpurl frobnicate PROFILE` or `tpurl plan --check`.")
    assert unknown_fields(text) == ["gke.no_such_budget_s"]
    assert unknown_commands(text) == ["frobnicate"]


def test_the_scans_catch_a_string_code_and_a_category_the_code_does_not_declare(
        tmp_path: Path) -> None:
    package = tmp_path / "flows"
    (package / "backends").mkdir(parents=True)
    (package / "backends" / "x.py").write_text(
        'A = "gke/new-thing"\nB = "not/a-code"\n'
        "user_error('s', 'a', 'b', 'c', code=Failure.GKE_SPEND_CAP)\n"
        "Diagnosis(FailureCategory.BUDGET, 'a', 'b', 'c', Failure.GKE_SPEND_CAP)\n")
    assert code_strings(package) == ["flows/backends/x.py:1 gke/new-thing"]
    assert raised_categories(package) == [
        ("x.py:3", FailureCategory.USER_ERROR, Failure.GKE_SPEND_CAP),
        ("x.py:4", FailureCategory.BUDGET, Failure.GKE_SPEND_CAP)]


def test_the_failures_reference_links_each_code_to_its_entry() -> None:
    page = (REPO_ROOT / "docs" / "reference" / "failures.md").read_text()
    troubleshooting = troubleshooting_page.render()
    for code in Failure:
        assert f"troubleshooting.md#{anchor(code)})" in page, code
        assert f"### `{code}` {{#{anchor(code)}}}" in troubleshooting, code


@pytest.mark.parametrize("page", HOW_TO, ids=lambda page: page.name)
def test_the_how_to_pages_name_only_fields_and_commands_that_exist(page: Path) -> None:
    text = page.read_text()
    assert unknown_fields(text) == [], f"{page.name} names profile fields that do not exist"
    assert unknown_commands(text) == [], f"{page.name} names tpurl commands that do not exist"


def test_the_module_that_declares_codes_does_not_count_as_raising_them(tmp_path: Path) -> None:
    package = tmp_path / "flows"
    for module, code in (("common/failure_codes.py", "GKE_SPEND_CAP"),
                         ("backends/x.py", "GKE_HOST_MEMORY")):
        (package / module).parent.mkdir(parents=True, exist_ok=True)
        (package / module).write_text(f"CODE = Failure.{code}\n")
    storage_errors = {Failure[f"STORAGE_{name}"] for name in STORAGE_ERRNOS}
    assert set(failures_page.codes_in(package)) - storage_errors == {Failure.GKE_HOST_MEMORY}
