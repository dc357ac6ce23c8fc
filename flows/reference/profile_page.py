"""The profile page: every field of `flows.config.Profile` with its type, default, allowed
values and description, walked from the pydantic models themselves.

A field's description is written where the field is defined (an attribute docstring, read
by pydantic through ``use_attribute_docstrings``, or ``Field(description=...)``), so the same
text reaches this page and the JSON schema. The page counts the fields that have none."""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass
from typing import Any, Literal

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from flows.config import Profile
from flows.reference.markdown import cell, table


@dataclass(frozen=True)
class FieldRow:
    path: str
    type: str
    default: str
    allowed: str
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
    if origin is not None:
        args = ", ".join(_type_name(a) for a in typing.get_args(annotation))
        return f"{getattr(origin, '__name__', str(origin))}[{args}]"
    if isinstance(annotation, type):
        return "section" if issubclass(annotation, BaseModel) else annotation.__name__
    return str(annotation).replace("typing.", "")


def _choices(annotation: Any) -> list[str]:
    origin = typing.get_origin(annotation)
    if origin is Literal:
        return [str(v) for v in typing.get_args(annotation)]
    if origin is not None:
        return [c for arg in typing.get_args(annotation) for c in _choices(arg)]
    return []


_BOUNDS = ((annotated_types.Ge, "≥", "ge"), (annotated_types.Gt, ">", "gt"),
           (annotated_types.Le, "≤", "le"), (annotated_types.Lt, "<", "lt"))


def _allowed(info: FieldInfo) -> str:
    choices = list(dict.fromkeys(_choices(info.annotation)))  # one mode or a list of them
    parts = [", ".join(f"`{c}`" for c in choices)] if choices else []
    for item in info.metadata:
        for kind, sign, attr in _BOUNDS:
            if isinstance(item, kind):
                parts.append(f"{sign} {getattr(item, attr)}")
    return "; ".join(parts)


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


def rows(model: type[BaseModel] = Profile, prefix: str = "") -> list[FieldRow]:
    found = []
    computed = unset_means()
    for name, info in model.model_fields.items():
        key = info.alias or name
        path = f"{prefix}{key}"
        found.append(FieldRow(path, _type_name(info.annotation),
                              computed.get(path) or _default(info),
                              _allowed(info), info.description or ""))
        keyed = typing.get_origin(info.annotation) is dict
        for inner in _models_in(info.annotation):
            found += rows(inner, f"{path}.<key>." if keyed else f"{path}.")
    return found


def render() -> str:
    fields = rows()
    described = sum(1 for f in fields if f.description)
    lines = ["# Profile fields", "",
             "Generated from `flows/config` by `python -m flows.reference`; do not edit by hand."
             " A profile is a YAML file under `deployments/profiles/`; `--set FIELD=VALUE` and "
             "`TPURL_SECTION__FIELD` set a field for one command.", "",
             f"{len(fields)} fields, {described} with a description.", ""]
    lines += table(["field", "type", "default", "allowed", "description"],
                   [[f"`{f.path}`", cell(f.type), cell(f.default), cell(f.allowed),
                     cell(f.description)] for f in fields])
    return "\n".join(lines) + "\n"
