"""Profile overrides from the environment (pure): ``TPURL_<FIELD>`` for a top-level field
(``TPURL_FLOW_TIMEOUT_S``), ``TPURL_<SECTION>__<FIELD>`` below it, "__" for each "."
(``TPURL_GKE__PROJECT``): a deployment's user sets fields through its env.

Other TPURL_ variables configure the tooling, not the profile (TPURL_FLOW_IMAGE,
TPURL_CACHE_DIR, TPURL_INSTALLER, TPURL_GCLUSTER_BUNDLE, ...), and pass untouched: their names
are far from every field's. A single-segment variable close to a field's name is refused,
naming it and that field, rather than ignored: a typo such as TPURL_FLOW_TIMEOUT would run
with the value the user believes was changed. (A name with "__" always maps to a path, and
the profile's validation refuses a path that is no field.)
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator, Mapping
from functools import cache
from typing import Any

from pydantic import BaseModel

from flows.common.failure_codes import Failure
from flows.common.issues import Issue
from flows.config.profile import Profile

ENV_PREFIX = "TPURL_"
# How close (difflib's ratio) a variable's name must be to a field's to be taken for a
# misspelt override. The tooling's own variables are at most 0.67 from any field's name
# (tests/config/test_env_overrides.py checks every TPURL_ name the code uses).
CLOSE = 0.8


def model_in(annotation: Any) -> type[BaseModel] | None:
    """The section model an annotation holds, also when it is optional."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    return None


def _leaves(model: type[BaseModel], prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    for name, info in model.model_fields.items():
        section = model_in(info.annotation)
        if section is None:
            yield (*prefix, name)
        else:
            yield from _leaves(section, (*prefix, name))


@cache
def _fields() -> dict[str, str]:
    """Each field's variable name (without the prefix, lower case) → its dotted path."""
    return {"__".join(path): ".".join(path) for path in _leaves(Profile)}


def env_name(field: str) -> str:
    return ENV_PREFIX + field.replace(".", "__").upper()


def env_overrides(environ: Mapping[str, str]) -> tuple[dict[str, str], list[Issue]]:
    """The overrides (dotted path → value) the environment makes, and an issue for each
    TPURL_ variable that looks like a misspelt one."""
    overrides: dict[str, str] = {}
    issues: list[Issue] = []
    top_level = {name for name, info in Profile.model_fields.items()
                 if model_in(info.annotation) is None}
    sections = {name for name, info in Profile.model_fields.items()
                if model_in(info.annotation) is not None}
    for variable, value in environ.items():
        if not variable.startswith(ENV_PREFIX):
            continue
        key = variable[len(ENV_PREFIX):].lower()
        if "__" in key:
            if any(not part for part in key.split("__")):  # TPURL_GKE__, TPURL___X: no field
                issues.append(Issue(variable, "names no field (an empty part between "
                                    "the '__')", f"name one, e.g. {env_name('gke.project')}; "
                                    "or unset it", Failure.CONFIG_UNKNOWN_ENV))
            else:
                overrides[key.replace("__", ".")] = value
        elif key in top_level:
            overrides[key] = value
        elif key in sections:
            issues.append(Issue(variable, f"names the section {key}, not a field, so it "
                                "would be ignored", f"set one field of it, e.g. "
                                f"{env_name(_example(key))}; or unset it", Failure.CONFIG_UNKNOWN_ENV))
        elif meant := _meant(key):
            listed = " or ".join(f"{env_name(f)} (the field {f})" for f in meant)
            issues.append(Issue(variable, "sets no profile field, so it would be ignored",
                                f"did you mean {listed}? rename it, or unset it",
                                Failure.CONFIG_UNKNOWN_ENV))
    return overrides, issues


def _meant(key: str) -> list[str]:
    """The fields a single-segment variable was likely meant for: those whose own name it
    is (TPURL_CAPACITY: the section left out), else the closest by spelling."""
    by_name = [field for field in _fields().values() if field.rsplit(".", 1)[-1] == key]
    if by_name:
        return sorted(by_name)
    close = difflib.get_close_matches(key, list(_fields()), n=1, cutoff=CLOSE)
    return [_fields()[close[0]]] if close else []


def _example(section: str) -> str:
    """A field of the section to show in a fix: the first a reader of the tutorial sets."""
    fields = [f for f in _fields().values() if f.startswith(section + ".")]
    return next((f for f in ("gke.project", "local.root") if f in fields), fields[0])
