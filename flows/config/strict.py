"""The base of every profile section: unknown keys refused, values frozen, blanks unset; and
the one way a validator raises a problem with its fix."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, model_validator

from flows.config.errors import FixableValueError


class StrictModel(BaseModel):
    # attribute docstrings become field descriptions: validation errors, the JSON schema and
    # docs/reference/profile.md (flows/reference/profile_page.py) read the same text
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    @model_validator(mode="before")
    @classmethod
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
