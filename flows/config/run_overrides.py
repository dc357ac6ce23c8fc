"""What a deployment's flow run may change: the run-tunable fields, read from the schema.

Whoever can create a flow run of a deployment (the UI's run form, `prefect deployment run`,
an automation) sets its ``overrides`` parameter; the deployment's owner wrote the profile and
its env. So such a run may change only the fields the profile's models mark with
``run_tunable`` (flows/config/section_base.py explains the mark): training and evaluation knobs
and the dataset and revision an announcement carries. Everything else (images, secret
references, the backend and its sections, project, cluster, bucket, identities, local
paths) is fixed by the deployment, and an override of it is refused naming the field, before
anything runs. A section is never tunable as a whole: ``{"gke": ""}`` would remove it, and a
tunable field of an optional section the profile lacks (``eval.batches`` without ``eval:``)
would add one, so both are refused too.

The `tpurl` CLI's ``--set`` and the TPURL_ environment are the owner's and stay unrestricted
(flows/config/loading.py applies this only to a deployment's run).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator, Mapping
from functools import cache
from typing import Any, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from flows.common.failure_codes import Failure
from flows.common.issues import Issue
from flows.config.env_overrides import model_in
from flows.config.profile import Profile
from flows.config.section_base import RUN_TUNABLE

FIXED = "is fixed by the deployment (a run's overrides may change only run-tunable fields)"
FIX = ("change it in the profile (or the deployment's TPURL_ variable in prefect.yaml: "
       "job_variables.NAME on the Kubernetes pool, job_variables.env.NAME on the process "
       "pool) and deploy again, or run it with `tpurl run PROFILE --set`; "
       "`tpurl profiles --tunable` lists what a run may change")


def _mark(info: FieldInfo) -> bool | frozenset[str]:
    """True: the field is tunable; a set: only these keys of the map; False: fixed."""
    extra = info.json_schema_extra
    mark = extra.get(RUN_TUNABLE, False) if isinstance(extra, dict) else False
    if isinstance(mark, list):
        return frozenset(str(key) for key in mark)
    return mark is True


def _walk(model: type[BaseModel], prefix: tuple[str, ...] = ()
          ) -> Iterator[tuple[str, bool | frozenset[str]]]:
    for name, info in model.model_fields.items():
        section = _section(info)
        mark = _mark(info)
        if section is None or mark:
            yield ".".join((*prefix, name)), mark
        else:
            yield from _walk(section, (*prefix, name))


@cache
def tunable_fields() -> tuple[str, ...]:
    """Every path a run may override, sorted (a marked map's keys as FIELD.KEY)."""
    paths: list[str] = []
    for path, mark in _walk(Profile):
        if mark is True:
            paths.append(path)
        elif mark:
            paths += [f"{path}.{key}" for key in mark]
    return tuple(sorted(paths))


def _section(info: FieldInfo) -> type[BaseModel] | None:
    """The model a field holds as a section; None for a value or a map (even of models:
    gke.prices holds ModePrice values under keys that are no fields)."""
    if get_origin(info.annotation) is dict:
        return None
    return model_in(info.annotation)


def _optional_section(info: FieldInfo) -> bool:
    return _section(info) is not None and info.default is None


def refusal(dotted: str, data: Mapping[str, Any]) -> Issue | None:
    """None when a run may set ``dotted`` on a profile whose merged fields are ``data``
    (file and environment), else the issue naming it. Pure."""
    parts = dotted.split(".")
    if not all(parts):  # "eval..batches", "eval.batches.": an empty part names no field
        return _unknown(dotted, "")
    model: type[BaseModel] = Profile
    node: Any = data
    for depth, part in enumerate(parts):
        info = model.model_fields.get(part)
        if info is None:
            return _unknown(dotted, ".".join(parts[:depth]))
        present = isinstance(node.get(part) if isinstance(node, Mapping) else None, Mapping)
        if _optional_section(info) and not present and depth < len(parts) - 1:
            return Issue(dotted, f"would add the {'.'.join(parts[:depth + 1])} section, "
                         "which the profile does not have: a section " + FIXED, FIX,
                         Failure.CONFIG_FIXED_BY_DEPLOYMENT)
        mark = _mark(info)
        rest = ".".join(parts[depth + 1:])
        if mark is True:  # a value (or a whole map) a run may set, never a path below it
            return None if not rest or get_origin(info.annotation) is dict \
                else _unknown(dotted, ".".join(parts[:depth + 1]))
        if mark:  # a map of which only some keys are tunable (MaxText keys hold dots)
            if rest in mark:
                return None
            return Issue(dotted, FIXED if rest else f"{FIXED} (a whole map)", FIX,
                         Failure.CONFIG_FIXED_BY_DEPLOYMENT)
        section = _section(info)
        if section is None or not rest:  # a fixed value, or a whole section (removed by "")
            return Issue(dotted, FIXED, FIX, Failure.CONFIG_FIXED_BY_DEPLOYMENT)
        model = section
        node = node.get(part) if isinstance(node, Mapping) else None
    return Issue(dotted, FIXED, FIX, Failure.CONFIG_FIXED_BY_DEPLOYMENT)  # no parts: unreachable


def _unknown(dotted: str, parent: str) -> Issue:
    close = difflib.get_close_matches(dotted, tunable_fields(), n=1, cutoff=0.6)
    hint = f"did you mean {close[0]!r}? " if close else ""
    where = f"below {parent} " if parent else ""
    return Issue(dotted, f"names no profile field {where}that a run may change",
                 f"{hint}a run's overrides may set: {', '.join(tunable_fields())}",
                 Failure.CONFIG_FIXED_BY_DEPLOYMENT)


def refused_overrides(overrides: Mapping[str, Any], data: Mapping[str, Any]) -> list[Issue]:
    """One issue per override a deployment's run may not make (``data``: the profile's
    fields before the run's overrides)."""
    return [issue for key in overrides
            if (issue := refusal(str(key), data)) is not None]


# Who set a value in a run: the parameter (overrides, dataset_uri, model_revision), so an
# error says the run's parameter is at fault, not the profile file (loading.py tags them).
RUN_SETTER = "the run's {} parameter"


def caused_by_run(raw: list[Issue], tagged: list[Issue], before_run: list[Issue],
                  by_run: Mapping[str, str]) -> list[Issue]:
    """``tagged`` (``raw`` with their setters named), where an issue no run parameter set
    but which the profile without the run's values does not have (a check across fields,
    max_target_length against a run's max_prefill_predict_length) says the run caused it."""
    had = {(i.field, i.problem) for i in before_run}
    whose = " and ".join(sorted(set(by_run.values())))
    return [Issue(t.field, f"{t.problem} (caused by {whose})", t.fix, t.category)
            if t.problem == r.problem and (r.field, r.problem) not in had else t
            for r, t in zip(raw, tagged, strict=True)]


def run_header(source: str, issues: list[Issue], by_run: Mapping[str, str]) -> str | None:
    """A run whose own parameters are at fault says so, not that the profile file is
    invalid: the file may be fine, and the run's parameters are what to change."""
    named = {s for s in by_run.values() if any(s in i.problem for i in issues)}
    if not named:
        return None
    whose = " and ".join(sorted(named))
    if all(any(s in i.problem for s in named) for i in issues):
        return f"{whose} cannot be used with profile {source!r}"
    return f"profile {source!r} with {whose} is invalid"
