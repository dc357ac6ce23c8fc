"""Load a profile: YAML file, then environment overrides, then CLI overrides, then validate.

Precedence follows the usual rule (the closer to the command, the stronger). Overrides use
dotted paths (``gke.project=my-proj``); in the environment ``TPURL_GKE__PROJECT=my-proj``
(flows/config/env_overrides.py).
Nothing here touches the cloud: a bad profile fails before any stage runs.
"""

from __future__ import annotations

import copy
import difflib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from flows.common.failure_codes import Failure
from flows.common.issues import Issue
from flows.common.paths import PATCHES_FILE, PROFILES_DIR
from flows.common.yaml_text import load_yaml
from flows.config.capacity import split_listed
from flows.config.checks import profile_issues
from flows.config.env_overrides import env_name, env_overrides, model_in
from flows.config.errors import FixableValueError, ProfileError
from flows.config.gke import RETIRED_KEYS
from flows.config.profile import Profile
from flows.config.profile_file import (
    loop_issue,
    profile_name_problem,
    profile_names,
    read_profile_file,
    symlink_loop,
)
from flows.config.recipe import anchor_recipe_paths
from flows.config.run_overrides import (
    RUN_SETTER,
    caused_by_run,
    refused_overrides,
    run_header,
    tunable_fields,
)
from flows.config.unvouched_values import trusted_values, unvouched_issues

# Where the profile is loaded for: the `tpurl` CLI; a flow called in-process (by `tpurl run`
# or Python: its caller owns the profile); or a deployment's flow run (the UI's run form, an
# automation), whose user cannot pass --set and may change only the run-tunable fields
# through the run's `overrides` parameter (flows/config/run_overrides.py). The fix texts of a
# missing field name what applies there; in a run, an issue with a field a run parameter
# set names that parameter, and the message says the run's parameters, not the file, are bad.
Origin = Literal["cli", "flow", "deployment"]


def require_profile_name(value: object, parameter: str = "profile") -> Path:
    """The shipped profile ``value`` names, or ProfileError naming ``parameter``.

    A run created through the Prefect API (the run form, an automation, an event's label,
    another deployment's parameters) is anyone's who can reach the API: a path there would
    make the flow read any YAML file the worker can read, and trust it as the operator's
    profile. Only the shipped names are taken, before anything else is read (a deployment's
    own ``profile``, set by whoever deployed it, is the operator's: load_profile exempts it)."""
    text = value if isinstance(value, str) else repr(value)
    names = ", ".join(profile_names())
    problem = profile_name_problem(text) if isinstance(value, str) else \
        f"{text} is not a profile name"
    if problem is not None:
        raise ProfileError(parameter, [Issue(
            parameter, f"{problem}: a run created through the Prefect API takes a profile by "
            "name only, never a path", f"give one of: {names} (a profile of your own is "
            "deployed by adding it to deployments/profiles and deploying again; `tpurl run "
            "FILE.yaml` runs a file locally)", Failure.CONFIG_PROFILE_NOT_A_NAME)],
            header=f"run parameter {parameter!r} is invalid")
    return shipped_profile_path(text)


def shipped_profile_path(name: str) -> Path:
    """deployments/profiles/NAME.yaml, or ProfileError naming the closest shipped name."""
    path = PROFILES_DIR / f"{name}.yaml"
    if not path.is_file():
        close = difflib.get_close_matches(name, profile_names(), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ProfileError(name, [Issue(
            "profile", f"no profile named {name!r}{hint}",
            f"use one of: {', '.join(profile_names())}, or a path to a YAML file",
            Failure.CONFIG_NOT_FOUND)])
    return path


def resolve_profile_path(name_or_path: str) -> Path:
    candidate = Path(name_or_path)
    if symlink_loop(candidate):
        raise ProfileError(name_or_path, [loop_issue(candidate, "profile")])
    if candidate.suffix in (".yaml", ".yml") or candidate.exists():
        if not candidate.is_file():
            raise ProfileError(name_or_path, [Issue(
                "profile", f"no file at {candidate}", "give an existing YAML file or a name "
                f"from deployments/profiles: {', '.join(profile_names())}", Failure.CONFIG_NOT_FOUND)])
        return candidate
    return shipped_profile_path(name_or_path)


def load_profile(name_or_path: str, overrides: Mapping[str, str] | None = None,
                 environ: Mapping[str, str] | None = None, origin: Origin = "cli",
                 parameters: Mapping[str, str] | None = None,
                 deployed: Mapping[str, Any] | None = None,
                 deployed_env: Mapping[str, Any] | None = None,
                 deployed_profile: str | None = None) -> Profile:
    """Return a validated profile or raise ProfileError listing every problem.

    ``parameters``: in a run, the run parameter that set an override other than
    ``overrides`` itself (``{"data.train_files": "dataset_uri"}``), for the messages.
    ``deployed``: in a deployment's run, the ``overrides`` the deployment itself was created
    with (prefect.yaml, by whoever deploys: as trusted as the profile); an override with the
    same key and value is the deployment's, not the run's, and the run-tunable rule does not
    apply to it. Any other key or value is the run's. ``deployed_env``: likewise the
    deployment's environment variables (``Declared.env``); in a deployment's run a TPURL_
    field the environment sets with another name or value (the worker's inherited environment, which the
    deployment's owner does not see) obeys the same run-tunable rule.

    In a deployment's run ``name_or_path`` must be a shipped profile's name
    (:func:`require_profile_name`), unless it is ``deployed_profile``: the ``profile`` the
    deployment itself was created with (prefect.yaml, the operator's, trusted as the file)."""
    if origin == "deployment" and name_or_path != deployed_profile:
        path = require_profile_name(name_or_path)
    else:
        path = resolve_profile_path(name_or_path)
    data = _drop_nulls(read_profile_file(path))
    trusted = trusted_values(data, deployed)  # the file's and the deployment's own values
    from_env, misspelt = env_overrides(os.environ if environ is None else environ)
    if misspelt:
        raise ProfileError(str(path), misspelt)
    # The environment is the one source a user does not see on the command or in the file:
    # an issue with a field it set names the variable (dotted path → variable).
    setters: dict[str, str] = {}
    env_fields = _for_backend(from_env, data, overrides or {})
    if origin == "deployment" and (refused := _refused_env(env_fields, data, deployed_env)):
        raise ProfileError(str(path), refused, header=f"the environment of this deployment's "
                           f"run cannot be used with profile {str(path)!r}")
    for dotted, value in env_fields.items():
        _set_path(data, dotted, value)
        if value:  # an empty one unsets: "is required but not set" already names the variable
            setters[dotted] = env_name(dotted)
    by_run: dict[str, str] = {}
    for dotted in overrides or {}:
        setters.pop(dotted, None)  # the override wins: on the CLI it is in sight
        if origin != "cli":  # in a run it is not: name the parameter that set it
            by_run[dotted] = RUN_SETTER.format((parameters or {}).get(dotted, "overrides"))
    from_run = {k: v for k, v in (overrides or {}).items()
                if k not in (deployed or {}) or (deployed or {})[k] != v}
    if origin == "deployment" and (refused := refused_overrides(from_run, data)):
        tagged = [_with_setter(i, by_run) for i in refused]
        raise ProfileError(str(path), tagged, header=run_header(str(path), tagged, by_run))
    before_run = anchor_recipe_paths(copy.deepcopy(data), path.parent) if by_run else None
    for dotted, value in (overrides or {}).items():
        _set_path(data, dotted, value)
    data = anchor_recipe_paths(data, path.parent)
    setters.update(by_run)
    setter = setters.get("name") or ("--set name" if "name" in (overrides or {}) else None)
    if (named := own_name(data, path, setter)) is not None:
        raise ProfileError(str(path), [named], header=run_header(str(path), [named], by_run))
    try:
        profile = validate_profile_data(data, str(path), origin)
    except ProfileError as exc:
        issues = [_with_setter(i, setters) for i in exc.issues]
        if before_run is not None:  # a check across fields that only the run's values fail
            issues = caused_by_run(exc.issues, issues, _issues_of(before_run, str(path)),
                                   by_run)
        raise ProfileError(exc.source, issues,
                           header=run_header(exc.source, issues, by_run)) from None
    # a dataset or revision a deployment's run brought passes an announcement's rules
    # (flows/config/unvouched_values.py); the CLI and an in-process call are the owner's
    if origin == "deployment" and (unvouched := unvouched_issues(profile, trusted)):
        issues = [_with_setter(i, setters) for i in unvouched]
        raise ProfileError(str(path), issues, header=run_header(str(path), issues, by_run))
    return profile


def own_name(data: dict[str, Any], path: Path, setter: str | None) -> Issue | None:
    """Set ``data``'s name to the file's stem, its own: the name picks the team (budget and
    queue), the profile lock and the promotion pointer, so it is never a base's (dropped
    when read, profile_file.py), a line that names another profile, or an override. A file
    or override naming another is refused (None: named); ``setter`` names what set the
    name when it was not the file (an override, a variable). Changes ``data``."""
    stem = path.stem
    written = data.get("name")
    if written is None or written == stem:
        data["name"] = stem
        return None
    fix = (f"drop {setter} (a profile's name is its file's: {stem})" if setter else
           f"write name: {stem} or drop the line, or rename the file to {written}.yaml if it "
           "is that profile")
    return Issue("name", f"is {written!r}, and a profile's name is its file's stem ({stem!r}): "
                 "the name picks the team, the lock and the promotion pointer", fix,
                 Failure.CONFIG_PROFILE_NAME)


def _refused_env(env_fields: Mapping[str, str], data: Mapping[str, Any],
                 deployed_env: Mapping[str, Any] | None) -> list[Issue]:
    """The environment's profile fields a deployment's run may not have: those the
    deployment's own env does not set to the same value and a run may not change."""
    declared = deployed_env or {}
    from_run = {dotted: value for dotted, value in env_fields.items()
                if declared.get(env_name(dotted)) != value}
    return [_with_setter(issue, {issue.field: env_name(issue.field)})
            for issue in refused_overrides(from_run, data)]


def _issues_of(data: dict[str, Any], source: str) -> list[Issue]:
    try:
        validate_profile_data(data, source)
    except ProfileError as exc:
        return exc.issues
    return []


def _for_backend(from_env: dict[str, str], data: dict[str, Any],
                 overrides: Mapping[str, str]) -> dict[str, str]:
    """The environment's overrides, less those of the other backend's section: a shell that
    exports the GKE fields (TPURL_GKE__PROJECT, ...) for the tutorial also runs the rehearsal,
    whose profile would otherwise grow a gke section and be refused for its missing fields."""
    backend = overrides.get("backend") or from_env.get("backend") or data.get("backend")
    other = {"gke": "local", "local": "gke"}.get(str(backend))
    return {k: v for k, v in from_env.items() if other is None or k.split(".")[0] != other}


def _with_setter(issue: Issue, setters: Mapping[str, str]) -> Issue:
    """A field the file does not have, or a value it does not hold, is searched for in the
    file first: say which variable set it (never its value: it may be a token)."""
    matches = [dotted for dotted in setters
               if issue.field == dotted or issue.field.startswith(dotted + ".")
               or ("." in issue.field and dotted.startswith(issue.field + "."))]
    if not matches:
        return issue
    setter = setters[max(matches, key=len)]  # gke.zone.x, not gke.zone, for gke.zone's error
    return Issue(issue.field, f"{issue.problem} (set by {setter})", issue.fix, issue.category)


def validate_profile_data(data: dict[str, Any], source: str, origin: Origin = "cli") -> Profile:
    try:
        profile = Profile.model_validate(data)
    except ValidationError as exc:
        raise ProfileError(source, _translate(exc, origin)
                           + _reservation_missing(data, exc, origin)) from None
    issues = profile_issues(profile, known_patch_ids())
    if issues:
        raise ProfileError(source, issues)
    return profile


def known_patch_ids() -> list[str]:
    if not PATCHES_FILE.is_file():
        return []
    declared = load_yaml(PATCHES_FILE.read_text()) or {}
    return [p["id"] for p in declared.get("patches", [])]


def parse_override(text: str) -> tuple[str, str]:
    """``section.field=value`` → (path, value); a path with an empty part names no field."""
    if "=" not in text:
        key = text.strip() or "FIELD"
        raise ProfileError("--set", [Issue(f"--set {key}", "has no '=' (a field and no value)",
                                           f"write --set {key}=VALUE (--set {key}= resets it "
                                           "to its default)")])
    key, value = text.split("=", 1)
    key = key.strip()
    if not key or any(not part.strip() for part in key.split(".")):
        raise ProfileError("--set", [Issue(f"--set {key or '=...'}",
                                           "names no field (an empty part in the dotted path)",
                                           "write --set section.field=VALUE, e.g. "
                                           "--set gke.project=my-proj")])
    return key, value


def _drop_nulls(value: Any) -> Any:
    """A field written but left empty in YAML means 'not set': required ones say so clearly."""
    if isinstance(value, dict):
        return {k: _drop_nulls(v) for k, v in value.items() if v is not None}
    return value


def _set_path(data: dict[str, Any], dotted: str, value: str) -> None:
    parts = dotted.split(".")
    if "args" in parts[:-1]:  # MaxText keys may contain dots themselves (rl.num_generations)
        cut = parts.index("args") + 1
        parts = [*parts[:cut], ".".join(parts[cut:])]
    node = data
    for part in parts[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = {}
            node[part] = child
        node = child
    # Kept as text: pydantic converts it for typed fields, and MaxText arguments are text anyway
    # (YAML parsing would turn a version like 1.10 into the number 1.1). An empty value
    # removes the key, as an empty field in the YAML does: a MaxText argument goes back to
    # MaxText's default, a field to the profile model's default.
    if value == "":
        node.pop(parts[-1], None)
        return
    node[parts[-1]] = value


def how_to_set(field: str, origin: Origin) -> str:
    """The override a user at ``origin`` can make (fix texts end with it)."""
    # a key with a "-" (gke.prices.on-demand) makes a variable name no shell can export
    shell_safe = "-" not in field
    if origin == "cli":
        return (f"pass --set {field}=VALUE (or the environment variable {env_name(field)})"
                if shell_safe else f"pass --set {field}=VALUE")
    if origin == "deployment" and field not in tunable_fields():
        return (f"set {env_name(field)} in the deployment's env ({_deployment_env(field)} in "
                "prefect.yaml): a run's overrides cannot change it")
    return (f'give the run\'s overrides parameter {{"{field}": "VALUE"}} (or set '
            f"{env_name(field)} in the deployment's env: {_deployment_env(field)} in "
            "prefect.yaml)")


def _deployment_env(field: str) -> str:
    """Where prefect.yaml sets a field's variable for a deployment's flow: its own job
    variable on the Kubernetes pool (whose job configuration has no ``env`` a run could add
    a name to), the ``env`` variable on the process pool."""
    return (f"job_variables.{env_name(field)} on the Kubernetes pool, "
            f"job_variables.env.{env_name(field)} on the process pool")


def _translate(exc: ValidationError, origin: Origin) -> list[Issue]:
    issues = []
    for error in exc.errors():
        loc = [str(p) for p in error["loc"]]
        field = ".".join(loc) or "profile"
        cause = (error.get("ctx") or {}).get("error")
        if isinstance(cause, FixableValueError):
            for one in (cause, *cause.also):
                inner, named = one.field, field
                if inner is not None:
                    named = ".".join([*loc, inner]) if loc and not inner.startswith(loc[0]) \
                        else inner
                issues.append(Issue(named, one.problem, one.fix))
        elif error["type"] == "extra_forbidden" and field in RETIRED_KEYS:
            problem, fix = RETIRED_KEYS[field]
            issues.append(Issue(field, problem, fix, Failure.CONFIG_RETIRED))
        elif error["type"] == "extra_forbidden":
            issues.append(Issue(field, "is not a known field", _unknown_fix(loc)))
        elif error["type"] == "missing" and (section := _model_at(loc)) is not None:
            # a whole section: no --set or variable makes one, the file must have it
            required = [n for n, info in section.model_fields.items() if info.is_required()]
            issues.append(Issue(field, "is required but not set",
                                f"add the {loc[-1]}: section to the profile"
                                + (f" with {', '.join(f'{field}.{n}' for n in required)}"
                                   if required else ""), Failure.CONFIG_MISSING))
        elif error["type"] == "missing":
            issues.append(Issue(field, "is required but not set",
                                f"set it in the profile, or {how_to_set(field, origin)}",
                                Failure.CONFIG_MISSING))
        elif loc[-1:] == ["[key]"]:  # a map's key outside the allowed ones (estimated_hours)
            named = ".".join(loc[:-1])
            issues.append(Issue(named, f"is not a known key: {error['msg']}",
                                f"rename it to one the message lists, or remove {named}"))
        else:
            issues.append(Issue(field, f"{error['msg']} (got {error.get('input')!r})",
                                _type_fix(field, error["type"], origin,
                                          error.get("ctx") or {})))
    return issues


# pydantic's error types for "a mapping was expected" (a section, a map of prices or args)
_MAPPING_ERRORS = frozenset({"dict_type", "model_type", "model_attributes_type"})


# pydantic's range errors: the bound each names and the step to the nearest allowed value
_RANGE_STEP = {"greater_than_equal": ("ge", 0), "less_than_equal": ("le", 0),
               "greater_than": ("gt", 1), "less_than": ("lt", -1)}


def _bound(error_type: str, ctx: Mapping[str, Any]) -> str | None:
    """The nearest value a range pydantic refused allows (``ge``: the bound itself, ``gt``:
    one above it), or None where there is no range or an open bound of a fraction (a float
    bound has no nearest value above it)."""
    if error_type not in _RANGE_STEP:
        return None
    kind, step = _RANGE_STEP[error_type]
    bound = ctx.get(kind)
    if isinstance(bound, bool) or not isinstance(bound, int | float):
        return None
    if isinstance(bound, float) and step:
        return None
    return f"{bound + step:g}"


def _type_fix(field: str, error_type: str, origin: Origin,
              ctx: Mapping[str, Any] | None = None) -> str:
    """A wrong type or range: the fix names the field and how to change it, not just 'fix it';
    for a range, the nearest value it allows."""
    if (nearest := _bound(error_type, ctx or {})) is not None:
        return (f"set {field}={nearest} (the nearest value it allows), or another in range: "
                f"in the profile, or {how_to_set(field, origin)}")
    if error_type in _MAPPING_ERRORS:
        last = field.rsplit(".", 1)[-1]
        return (f"write {field} as a mapping of keys and values ({last}: {{KEY: VALUE}} in "
                f"the profile), or set one key below it: {how_to_set(field + '.KEY', origin)}")
    return (f"give {field} a value as the message says: in the profile, or "
            f"{how_to_set(field, origin)}")


def _reservation_missing(data: dict[str, Any], exc: ValidationError,
                         origin: Origin) -> list[Issue]:
    """gke.reservation is required by capacity 'reservation' only, so pydantic cannot call it
    missing; when other required fields are missing too, list it with them (one round of
    fixes, not two). The section's own check reports it when everything else is set."""
    gke = data.get("gke")
    if not isinstance(gke, dict) or gke.get("reservation"):
        return []
    listed = split_listed(gke.get("capacity", "reservation"))
    if "reservation" not in (listed if isinstance(listed, list) else [str(listed)]):
        return []
    if not any(e["type"] == "missing" and e["loc"][:1] == ("gke",) for e in exc.errors()):
        return []
    return [Issue("gke.reservation", "is required by gke.capacity: reservation but not set",
                  f"set it in the profile, or {how_to_set('gke.reservation', origin)}; or "
                  "choose gke.capacity: on-demand, spot, flex-start or queued", Failure.CONFIG_MISSING)]


def _model_at(loc: list[str]) -> type[BaseModel] | None:
    """The section model at a field's path (None for a value, or a path that is no field)."""
    model: type[BaseModel] | None = Profile
    for part in loc:
        if model is None:
            return None
        info = model.model_fields.get(part)
        model = model_in(info.annotation if info else None)
    return model


def _unknown_fix(loc: list[str]) -> str:
    model = _model_at(loc[:-1])
    known = sorted(model.model_fields) if model else []
    close = difflib.get_close_matches(loc[-1], known, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return f"{hint}remove it or use one of: {', '.join(known)}"
