"""Every limit a profile check enforces is shown on the profile page, read from where it is
declared: a field's own limit from the models' JSON schema (its type, flows/config/types.py),
a check across fields from the declaration beside it. A validator that carries a limit the
page cannot read fails here, naming it, and so does a declared limit that names no field or
that the committed page does not show."""

from __future__ import annotations

import ast
import inspect
import re
import textwrap
from typing import Annotated, Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from flows.common.issues import Issue
from flows.config import Profile, checks
from flows.config.errors import FixableValueError
from flows.config.limits import declaration, limits, reshapes
from flows.config.loading import _translate
from flows.config.types import Checked
from reference import profile_page
from reference.markdown import cell
from reference.pages import REFERENCE_DIR
from reference.profile_page import undeclared


def _sections() -> list[type[BaseModel]]:
    return list(dict.fromkeys(model for model, _prefix in profile_page._sections(Profile, "")))


def test_every_validator_of_the_profile_declares_its_limit() -> None:
    models = _sections()
    assert len(models) >= 20  # the walk reaches the nested sections (gke.prices.<key>, ...)
    missing = [name for model in models for name in undeclared(model)]
    assert not missing, ("these validators carry a limit the page cannot read: make a field's "
                         "check its type (Annotated[..., Checked(CHECK, TEXT)], "
                         "flows/config/types.py), put @limits({PATH: TEXT}) above a check "
                         f"across fields, @reshapes(WHY) above one that refuses nothing: {missing}")


def test_only_a_validator_that_runs_before_the_field_s_checks_may_claim_to_reshape() -> None:
    """``@reshapes`` says a validator refuses nothing; one that runs after pydantic's own
    checks exists to refuse something, so it must declare what."""
    for model in _sections():
        decorators = model.__pydantic_decorators__
        for group in (decorators.field_validators, decorators.model_validators):
            for name, validator in group.items():
                declared = declaration(validator.func)
                if declared is not None and declared.reshapes:
                    assert validator.info.mode == "before", f"{model.__qualname__}.{name}"
                    assert not declared.limits


def test_the_validators_counted_are_the_profile_s_own() -> None:
    """The walk above sees every field and model validator of the sections: one that
    pydantic holds but the walk missed would go unchecked."""
    validators = {f"{m.__qualname__}.{name}" for m in _sections()
                  for group in (m.__pydantic_decorators__.field_validators,
                                m.__pydantic_decorators__.model_validators)
                  for name in group}
    assert {"GkeSection._capacity_needs", "GkeSection._zone_from_zones", "SecretRef._exactly_one",
            "WandbTracking._key_when_online", "RewardsRecipe._comma_list"} <= validators
    assert len(validators) >= 20


def _called(function: object) -> set[str]:
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))  # type: ignore[arg-type]
    return {node.func.id for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)}


def test_every_rule_tpurl_validate_applies_is_declared_with_its_limits() -> None:
    """profile_issues' rules are the ones checks.RULES lists (which the page reads), and
    each declares the limits it enforces."""
    rules = {rule.__name__: rule for rule in checks.RULES}
    called = {name for name in _called(checks.profile_issues)
              if inspect.isfunction(getattr(checks, name, None))}
    assert called == set(rules), ("profile_issues calls rules that checks.RULES does not "
                                  f"list (or the other way): {called ^ set(rules)}")
    for name, rule in rules.items():
        declared = declaration(rule)
        assert declared is not None and declared.limits, f"{name} declares no limit"


def test_every_declared_limit_names_a_field_and_the_page_shows_it() -> None:
    page = (REFERENCE_DIR / "profile.md").read_text()
    lines = {line.split(" | ")[0].removeprefix("| ").strip("`"): line
             for line in page.splitlines() if line.startswith("| `")}
    declared = profile_page.declared_limits()
    assert len(declared) >= 40 and "" in declared  # the checks across fields
    for path, texts in declared.items():
        where = page.split("| field |")[0] if path == "" else lines.get(path)
        assert where is not None, f"{path!r}: a declared limit names no profile field"
        for text in texts:
            assert cell(text) in where, f"{path}: the page does not show {text!r}"


def test_every_limit_of_the_json_schema_is_on_the_page() -> None:
    """A Field(gt=…), le, a Literal's choices, a Checked type's text: each field shows what
    its JSON schema holds, in the parts of its type too (a list's items, a map's values)."""
    rows = {row.path: row for row in profile_page.rows()}
    assert "> 0" in rows["gke.schedule_budget_s"].limits
    assert rows["announcements.settle_s"].limits.startswith("≥ 0 · ≤ 300")
    assert "> 0" in rows["gke.estimated_hours"].limits  # inside dict[..., Annotated[float, ...]]
    assert rows["backend"].limits == "`gke`, `local`"
    for model, prefix in profile_page._sections(Profile, ""):
        for name, info in model.model_fields.items():
            path = f"{prefix}{info.alias or name}"
            schema = profile_page.field_schemas(model)[info.alias or name]
            for shown in profile_page.schema_limits(schema):
                assert shown in rows[path].limits, (path, shown)
    assert "≤ 604800" in rows["gke.schedule_budget_s"].limits  # a Checked type's JSON keyword
    assert "a Kubernetes quantity" in rows["gke.conversion_memory"].limits  # its text
    assert "no glob characters" in rows["announcements.allowed_uri_prefixes"].limits  # items


class _Example(BaseModel):
    model_config = ConfigDict(use_attribute_docstrings=True)
    code: str = Field("ab", min_length=2, max_length=8, pattern=r"^[a-z]+$")
    step: float = Field(0.5, multiple_of=0.5, ge=0)
    mode: Literal["a", "b"] = "a"
    tags: Annotated[list[str], Checked(lambda v: v, "no tag twice")] = Field(
        default_factory=list)
    level: Annotated[int, Checked(lambda v: v, maximum=9)] = 1
    other: str = "x"

    @field_validator("other", mode="before")
    @classmethod
    @reshapes("a number becomes its text")
    def _text(cls, v: object) -> object:
        return str(v)

    @model_validator(mode="after")
    @limits({"other": ["not the code", "set when mode is b"]})
    def _apart(self) -> _Example:
        return self


def test_a_model_s_constraints_and_declared_limits_become_its_rows() -> None:
    rows = {row.path: row.limits for row in profile_page.rows(_Example)}
    assert rows == {"code": "length ≥ 2 · length ≤ 8 · matches `^[a-z]+$`",
                    "step": "≥ 0 · a multiple of 0.5", "mode": "`a`, `b`",
                    "tags": "no tag twice", "level": "≤ 9",
                    "other": "not the code · set when mode is b"}
    assert undeclared(_Example) == []


def test_a_validator_the_page_cannot_read_is_named() -> None:
    """A field validator that refuses (its limit belongs in the field's type) and a model
    validator that declares nothing are both named."""
    class Bare(BaseModel):
        size: int = 1

        @field_validator("size")
        @classmethod
        def _small(cls, v: int) -> int:
            if v > 9:
                raise ValueError("too big")
            return v

        @model_validator(mode="after")
        def _fine(self) -> Bare:
            return self

    assert [name.rsplit(".", 1)[-1] for name in undeclared(Bare)] == ["_small", "_fine"]


@pytest.mark.parametrize("value", ["my-run", "a.b_c-1"])
def test_a_pattern_limit_is_the_pattern_the_check_matches(value: str) -> None:
    """The profile name's shown pattern is the regular expression its check uses."""
    from flows.config.profile import _PROFILE_NAME

    shown = f"matches `{_PROFILE_NAME.pattern}`"
    assert re.fullmatch(_PROFILE_NAME.pattern, value)
    assert shown in {row.path: row for row in profile_page.rows()}["name"].limits


def _at_most_nine(value: int) -> int:
    if value > 9:
        raise FixableValueError(f"{value} is more than 9", "give at most 9")
    return value


class _Sized(BaseModel):
    size: Annotated[int, Checked(_at_most_nine, maximum=9)] = 1
    sizes: list[Annotated[int, Checked(_at_most_nine, maximum=9)]] = Field(default_factory=list)


@pytest.mark.parametrize(("data", "field"), [({"size": 10}, "size"), ({"sizes": [9, 10]}, "sizes.1")])
def test_a_checked_type_s_refusal_names_the_field_and_its_fix(data: dict[str, object],
                                                              field: str) -> None:
    """The value equal to the limit passes; one above it is refused with the check's own
    problem and fix, under the field's path (a list item's too), as the loader reports it."""
    assert _Sized(size=9, sizes=[9]).size == 9
    with pytest.raises(ValidationError) as refused:
        _Sized.model_validate(data)
    assert _translate(refused.value, "cli") == [Issue(field, "10 is more than 9", "give at most 9")]
    assert profile_page.schema_limits(profile_page.field_schemas(_Sized)["sizes"]) == ["≤ 9"]
