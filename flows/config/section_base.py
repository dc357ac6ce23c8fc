"""The base of every profile section: unknown keys refused, values frozen, blanks unset; the
one way a validator raises a problem with its fix; and the run-tunable mark.

The mark: a field defined with ``run_tunable(...)`` (pydantic's ``Field`` with
``json_schema_extra={"run_tunable": ...}``) may be changed by a deployment's flow run through
its ``overrides`` parameter; every other field is fixed by the deployment
(flows/config/run_overrides.py reads the marks by walking the schema, so the allowed set is
never a second list). ``keys=`` marks a map of MaxText arguments: only those keys are
tunable, since other arguments name files, code and paths. The mark also shows in
``Profile.model_json_schema()``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.config import JsonValue

from flows.config.errors import FixableValueError
from flows.config.limits import reshapes

RUN_TUNABLE = "run_tunable"


def run_tunable(default: Any = ..., *, keys: Iterable[str] | None = None, **field: Any) -> Any:
    """``Field(default, **field)`` marked run-tunable: the whole field, or only ``keys`` of a
    map (``default_factory=`` instead of a default works as in ``Field``)."""
    mark: JsonValue = list[JsonValue](sorted(keys)) if keys is not None else True
    if "default_factory" in field:
        return Field(json_schema_extra={RUN_TUNABLE: mark}, **field)
    return Field(default, json_schema_extra={RUN_TUNABLE: mark}, **field)


class StrictModel(BaseModel):
    # attribute docstrings become field descriptions: validation errors, the JSON schema and
    # docs/reference/profile.md (reference/profile_page.py) read the same text
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    @model_validator(mode="before")
    @classmethod
    @reshapes("a blank value (\"\" or spaces) is unset")
    def _blank_is_unset(cls, data: object) -> object:
        """A field written as "" or spaces means 'not set', as an empty YAML field and
        ``--set field=`` do: a required one is reported missing (naming how to set it), an
        optional one takes its default, and no blank name reaches a path, a lock or a
        command. (Only the model's own fields: MaxText arguments are values, kept as given.)"""
        if not isinstance(data, dict):
            return data
        return {key: value for key, value in data.items()
                if not (key in cls.model_fields and isinstance(value, str) and not value.strip())}


def check(problem: str | None, fix: str) -> None:
    if problem:
        raise FixableValueError(problem, fix)
