"""The profile page: every field of `flows.config.Profile` with its type, default, limits
and description, walked from the pydantic models themselves.

A field's description is written where the field is defined (an attribute docstring, read
by pydantic through ``use_attribute_docstrings``, or ``Field(description=...)``), so the same
text reaches this page and the JSON schema. The page counts the fields that have none.

A field's limits are what validation refuses, read from the models' JSON schema
(``Model.model_json_schema()``, as Prefect's generate_settings_ref.py, among its scripts,
reads its settings'): a pydantic constraint (minimum, maximum, pattern, enum, lengths) and a check's
own limit (flows/config/types.py ``Checked``). A check across fields cannot be a field's
type: a model validator and a ``tpurl validate`` rule (flows/config/checks.py ``RULES``)
carry their limits by the field paths they name (flows/config/limits.py)."""

from __future__ import annotations

import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from flows.config import Profile
from flows.config.limits import declaration
from flows.config.types import LIMITS_KEY
from reference.markdown import cell, table


@dataclass(frozen=True)
class FieldRow:
    path: str
    type: str
    default: str
    limits: str
    description: str


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]


def _type_name(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    if origin is Literal:
        return "choice"
    if origin is typing.Annotated:
        return _type_name(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        names = [_type_name(a) for a in typing.get_args(annotation) if a is not type(None)]
        optional = type(None) in typing.get_args(annotation)
        return " or ".join(dict.fromkeys(names)) + (" (optional)" if optional else "")
    if origin is tuple and typing.get_args(annotation)[1:] == (Ellipsis,):
        return f"list of {_type_name(typing.get_args(annotation)[0])}"  # YAML writes a list
    if origin is not None:
        args = ", ".join(_type_name(a) for a in typing.get_args(annotation))
        return f"{getattr(origin, '__name__', str(origin))}[{args}]"
    if isinstance(annotation, type):
        return "section" if issubclass(annotation, BaseModel) else annotation.__name__
    return str(annotation).replace("typing.", "")


LIMIT_SEPARATOR = " · "  # between a field's limits (their own texts may hold ";")
# JSON Schema's validation keywords as the page words them, in the order it shows them
_KEYWORDS = {"exclusiveMinimum": ">", "minimum": "≥", "exclusiveMaximum": "<", "maximum": "≤",
             "multipleOf": "a multiple of", "minLength": "length ≥", "maxLength": "length ≤",
             "minItems": "items ≥", "maxItems": "items ≤"}
# where a field's schema holds the schemas of its parts (a union, a list's items, a map's
# values and keys); a section's own fields (a $ref) are rows of their own
_PARTS = ("anyOf", "allOf", "oneOf", "items", "prefixItems", "additionalProperties",
          "propertyNames")


def schema_limits(schema: Any) -> list[str]:
    """What a field's JSON schema refuses, in the page's words: enum or const, the bounds
    and lengths, the pattern, then the checks' own texts (``x-limits``, written by
    flows/config/types.py ``Checked``), from the field and from the parts of its type."""
    if isinstance(schema, list):
        return list(dict.fromkeys(shown for part in schema for shown in schema_limits(part)))
    if not isinstance(schema, dict):
        return []
    shown = []
    if "enum" in schema or "const" in schema:
        shown.append(", ".join(f"`{v}`" for v in schema.get("enum", [schema.get("const")])))
    shown += [f"{sign} {schema[key]}" for key, sign in _KEYWORDS.items() if key in schema]
    if "pattern" in schema:
        shown.append(f"matches `{schema['pattern']}`")
    shown += schema.get(LIMITS_KEY, [])
    shown += [s for part in _PARTS for s in schema_limits(schema.get(part))]
    return list(dict.fromkeys(shown))


def field_schemas(model: type[BaseModel]) -> dict[str, Any]:
    """Each field's JSON schema by the name the profile uses (its alias)."""
    properties: dict[str, Any] = model.model_json_schema(by_alias=True).get("properties", {})
    return properties


def _default(info: FieldInfo) -> str:
    if info.is_required():
        return "required"
    if info.default_factory is not None:
        # the profile's factories take no argument; pydantic's type allows one taking the data
        value = info.default_factory()  # type: ignore[call-arg]
    elif info.default is PydanticUndefined:
        return ""
    else:
        value = info.default
    if isinstance(value, BaseModel):
        return ""
    if isinstance(value, dict) and any(isinstance(v, BaseModel) for v in value.values()):
        return "set for " + ", ".join(f"`{k}`" for k in value)
    if value == "":
        return '`""`'
    return "" if value is None else f"`{value!r}`" if not isinstance(value, str) else f"`{value}`"


def unset_means() -> dict[str, str]:
    """What the code does for an optional field left unset, where that is a value the code
    computes rather than "nothing": read from the constants the code uses, so the page says
    what a run does (tests/test_docs_reference.py checks every key is such a field)."""
    from flows.core.budgets import Budgets

    return {
        "gke.queue_budget_s": f"unset: `{Budgets.queue_s:g}` ({Budgets.queue_s / 3600:g} h)",
        "gke.run_budget_s": f"unset: `{Budgets.run_s:g}` ({Budgets.run_s / 3600:g} h)",
        "gke.train_run_budget_s": "unset: `gke.run_budget_s`",
        "gke.preemption_budget": f"unset: `{Budgets.preemptions}`",
        "gke.spend_margin": "unset: `0` (the cap may equal the estimate)",
        "gke.zones": "unset: `[gke.zone]`",
        "flow_timeout_s": "unset: every attempt of each stage, retries included (`tpurl plan` "
                          "prints it)",
        "eval.batch_size": "unset: not passed to MaxText (its own default applies)",
    }


def _sections(model: type[BaseModel], prefix: str) -> Iterator[tuple[type[BaseModel], str]]:
    """The model and every section model below it, each with its fields' path prefix."""
    yield model, prefix
    for name, info in model.model_fields.items():
        path = f"{prefix}{info.alias or name}"
        keyed = typing.get_origin(info.annotation) is dict
        for inner in _models_in(info.annotation):
            yield from _sections(inner, f"{path}.<key>." if keyed else f"{path}.")


def model_limits(model: type[BaseModel]) -> dict[str, list[str]]:
    """The declared limits of a model's own checks across fields (its model validators), by
    field path relative to it ("" for the section itself)."""
    found: dict[str, list[str]] = {}
    for across in model.__pydantic_decorators__.model_validators.values():
        declared = declaration(across.func)
        for path, text in declared.limits if declared else ():
            found.setdefault(path, []).append(text)
    return found


def undeclared(model: type[BaseModel]) -> list[str]:
    """The model's validators the page cannot read: a field validator that refuses something
    (a limit on one field is an ``Annotated`` type, flows/config/types.py) and a model
    validator that declares neither its limits nor that it only reshapes."""
    decorators = model.__pydantic_decorators__
    found = []
    for group, allowed in ((decorators.field_validators, "reshapes"),
                           (decorators.model_validators, "limits or reshapes")):
        for name, validator in group.items():
            declared = declaration(validator.func)
            if declared is None or (allowed == "reshapes" and not declared.reshapes):
                found.append(f"{model.__module__}.{model.__qualname__}.{name}")
    return found


def declared_limits(model: type[BaseModel] = Profile) -> dict[str, list[str]]:
    """The limits the checks written as code declare, by field path ("" for the whole
    profile): each model's validators (their paths relative to it; "" is the section itself),
    then, for the profile, the `tpurl validate` rules (their paths from the profile)."""
    from flows.config.checks import RULES

    found: dict[str, list[str]] = {}
    for section, prefix in _sections(model, ""):
        for relative, texts in model_limits(section).items():
            path = f"{prefix}{relative}" if relative else prefix.removesuffix(".")
            found.setdefault(path, []).extend(texts)
    if model is Profile:
        for rule in RULES:
            if declared := declaration(rule):
                for path, text in declared.limits:
                    found.setdefault(path, []).append(text)
    return found


def rows(model: type[BaseModel] = Profile, prefix: str = "",
         declared: dict[str, list[str]] | None = None) -> list[FieldRow]:
    found = []
    computed = unset_means()
    declared = declared_limits(model) if declared is None else declared
    schemas = field_schemas(model)
    for name, info in model.model_fields.items():
        key = info.alias or name
        path = f"{prefix}{key}"
        limits = dict.fromkeys([*schema_limits(schemas.get(key)), *declared.get(path, [])])
        found.append(FieldRow(path, _type_name(info.annotation),
                              computed.get(path) or _default(info),
                              LIMIT_SEPARATOR.join(limits), info.description or ""))
        keyed = typing.get_origin(info.annotation) is dict
        for inner in _models_in(info.annotation):
            found += rows(inner, f"{path}.<key>." if keyed else f"{path}.", declared)
    return found


def render() -> str:
    fields = rows()
    described = sum(1 for f in fields if f.description)
    limited = sum(1 for f in fields if f.limits)
    whole = "; ".join(declared_limits().get("", []))
    lines = ["# Profile fields", "",
             "Generated from `flows/config` by `python -m reference`; do not edit by hand."
             " A profile is a YAML file under `deployments/profiles/`; `--set FIELD=VALUE` and "
             "`TPURL_SECTION__FIELD` set a field for one command.", "",
             "The limits are what `tpurl validate` (and every command that loads the profile) "
             "refuses, each read from the check that enforces it: a field's own limit (its type, "
             "as the profile's JSON schema holds it), "
             "the section's checks across fields, and the rules across the profile. Across "
             f"the whole profile: {whole}.", "",
             f"{len(fields)} fields, {described} with a description, {limited} with limits.", ""]
    lines += table(["field", "type", "default", "limits", "description"],
                   [[f"`{f.path}`", cell(f.type), cell(f.default), cell(f.limits),
                     cell(f.description)] for f in fields])
    return "\n".join(lines) + "\n"
