"""Constrained values declared once: each an ``Annotated`` type that carries its check and
its limit, used by every field that holds that value (the pattern of Prefect's
``src/prefect/types/names.py``).

A limit pydantic enforces itself is a ``Field`` constraint (``ge``, ``pattern``, ...). A
check that must say more than pydantic's message (the fix a user follows) is a ``Checked``:
it runs after the type's own validation, raises ``FixableValueError``, and writes what it
refuses into the JSON schema, in JSON Schema's own words where there are some (``enum``,
``pattern``, ``maximum``), else as text under ``x-limits``. The profile page's limits
column is read from ``Model.model_json_schema()`` alone (reference/profile_page.py).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated, Any

from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, core_schema

from flows.config import gcp_names as names
from flows.config.errors import FixableValueError

LIMITS_KEY = "x-limits"  # the schema key of a limit JSON Schema has no word for


class Checked:
    """A check run after the type's own validation, and the limit it enforces, shown in the
    JSON schema: ``texts`` under ``x-limits``, ``keywords`` as JSON Schema's own
    (``enum=[...]``, ``pattern=re.compile(...)``, ``maximum=...``)."""

    def __init__(self, check: Callable[[Any], Any], *texts: str, before: bool = False,
                 **keywords: object) -> None:
        self.check = check
        self.before = before  # runs on the raw input (text with commas made a list)
        self.texts = texts
        self.keywords = {k: v.pattern if isinstance(v, re.Pattern) else v
                         for k, v in keywords.items()}

    def __get_pydantic_core_schema__(self, source: Any,
                                     handler: GetCoreSchemaHandler) -> CoreSchema:
        if self.before:
            return core_schema.no_info_before_validator_function(self.check, handler(source))
        return core_schema.no_info_after_validator_function(self.check, handler(source))

    def __get_pydantic_json_schema__(self, schema: CoreSchema,
                                     handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        shown = handler(schema)
        shown.update(self.keywords)
        if self.texts:
            shown[LIMITS_KEY] = [*shown.get(LIMITS_KEY, []), *self.texts]
        return shown


def refusing(problem_of: Callable[[str], str | None], fix: str) -> Callable[[str], str]:
    """A check from a function naming what is wrong with a value (None: nothing) and a fix."""
    def check(value: str) -> str:
        if problem := problem_of(value):
            raise FixableValueError(problem, fix)
        return value
    return check


def one_of(choices: tuple[str, ...], what: str, fix: str = "") -> Checked:
    """A text that must be one of ``choices``, shown as the schema's ``enum``."""
    return Checked(refusing(lambda v: None if v in choices else f"unknown {what} {v!r}",
                            fix or f"use one of {', '.join(choices)}"), enum=list(choices))


def dns_label(what: str, fix: str) -> Checked:
    """A Kubernetes or GCE name (one DNS label); ``what`` names it in the problem."""
    return Checked(refusing(lambda v: names.dns_label_problem(v, what), fix),
                   names.DNS_LABEL_LIMIT)


ProjectId = Annotated[str, Checked(refusing(
    names.project_id_problem, "use the project ID shown by `gcloud projects list`"),
    names.PROJECT_ID_LIMIT)]
Region = Annotated[str, Checked(refusing(
    names.region_problem, "v6e regions include us-east5, us-east1, us-central1"),
    names.REGION_LIMIT)]
