"""Read a profile's file into its fields, following ``extends``.

A profile may name another as its base (``extends: rehearsal``, or a path to a YAML file
beside it) and write only what differs: a team's profile that changes the model and the
bucket of the tutorial's, or the rehearsal of another model family, stays a few lines and
follows every later change of its base instead of a copy drifting from it.

The rule is a deep merge, the file over its base: a mapping merges key by key, anything else
(a list, a scalar) replaces the base's, and ``null`` removes the base's value (the loader
drops nulls before validating). A base's recipe paths are anchored at the base's own
directory first, so a file beside the base is still found from a profile elsewhere. Each
reader of a profile's fields (the loader, the notify deploy step, the choice lists) reads
them here, so no reader sees a different profile than the run does.

A profile's name is its own, never its base's: the name picks the team (its budget and
Kueue queue), the profile lock and the promotion pointer, so a base's ``name`` is dropped
before the merge (the loader then takes the file's stem, ``loading.own_name``), and
``extends: NAME`` reads only a file of deployments/profiles. A loop of symbolic links is
refused naming the file, like a loop of ``extends``.
"""

from __future__ import annotations

import errno
import re
from pathlib import Path
from typing import Any

import yaml

from flows.common.failure_codes import Failure
from flows.common.issues import Issue
from flows.common.paths import PROFILES_DIR
from flows.common.yaml_text import load_yaml
from flows.config.errors import ProfileError
from flows.config.recipe import anchor_recipe_paths

EXTENDS = "extends"
# A chain longer than this is a design mistake, not a need: each level is a file to read to
# know what runs.
MAX_BASES = 4
NAME = "name"

# A shipped profile's name (deployments/profiles/NAME.yaml): letters, digits and '.', '-', '_'
# inside it; no separator, no leading dot, so it can only name a file of that folder.
_PROFILE_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,126}[A-Za-z0-9])?")


def profile_name_problem(value: str) -> str | None:
    """Why ``value`` is not a profile's name but a path or something else (None: a name).
    Pure: whether the profile exists is resolve_profile_path's question."""
    if not _PROFILE_NAME.fullmatch(value) or ".." in value:
        return f"{value!r} is not a profile name (a name has no '/', '\\', '..' or leading '.')"
    if value.endswith((".yaml", ".yml")):
        return f"{value!r} is a file name, not a profile name"
    return None


def symlink_loop(path: Path) -> bool:
    """Whether ``path`` is (or passes through) a loop of symbolic links."""
    try:
        path.resolve(strict=True)
    except RuntimeError:  # pathlib's "Symlink loop from ..." (Python 3.12)
        return True
    except OSError as exc:
        return exc.errno == errno.ELOOP
    return False


def loop_issue(path: Path, field: str) -> Issue:
    return Issue(field, f"{path} is a loop of symbolic links (each points on to the next and "
                 "back), not a file", "point the link at the profile's YAML file, or replace "
                 "it by the file", Failure.CONFIG_EXTENDS if field == EXTENDS else Failure.CONFIG_NOT_FOUND)


def profile_names() -> list[str]:
    """The shipped profiles' names: the files of deployments/profiles."""
    return sorted(p.stem for p in PROFILES_DIR.glob("*.yaml"))


def read_profile_file(path: Path) -> dict[str, Any]:
    """The profile's fields as its file and its bases give them (not yet validated), or
    ProfileError naming the file, the field and the fix."""
    return _read(path, ())


def merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``over`` deep-merged onto ``base``: mappings key by key, anything else replaced.
    Pure; neither argument is changed."""
    out = dict(base)
    for key, value in over.items():
        below = out.get(key)
        out[key] = (merged(below, value) if isinstance(below, dict) and isinstance(value, dict)
                    else value)
    return out


def base_path(reference: str, child: Path) -> Path:
    """Where ``extends: REFERENCE`` points: a path (it ends in .yaml or .yml) read beside the
    file that names it, else a shipped profile's name, a file of deployments/profiles and
    nowhere else (ProfileError for a name that is a path, or a link out of the folder)."""
    if reference.endswith((".yaml", ".yml")):
        return child.parent / reference
    shipped = ", ".join(profile_names())
    fix = (f"write extends: NAME, one of the shipped profiles ({shipped}), or extends: "
           "FILE.yaml for a file beside this one")
    if (problem := profile_name_problem(reference)) is not None:
        raise ProfileError(str(child), [Issue(EXTENDS, problem, fix, Failure.CONFIG_EXTENDS)])
    path = PROFILES_DIR / f"{reference}.yaml"
    if not symlink_loop(path) and path.exists() and \
            not path.resolve().is_relative_to(PROFILES_DIR.resolve()):
        raise ProfileError(str(child), [Issue(
            EXTENDS, f"names {reference!r}, whose file {path} links out of {PROFILES_DIR}",
            fix, Failure.CONFIG_EXTENDS)])
    return path


def _parsed(path: Path) -> dict[str, Any]:
    if symlink_loop(path):
        raise ProfileError(str(path), [loop_issue(path, "profile")])
    try:
        raw = load_yaml(path.read_text())
    except yaml.YAMLError as exc:
        raise ProfileError(str(path), [Issue("profile", f"is not valid YAML: {exc}",
                                             "fix the YAML syntax at the position shown",
                                             Failure.CONFIG_YAML)]) from None
    if not isinstance(raw, dict):
        raise ProfileError(str(path), [Issue("profile", "is not a mapping of fields",
                                             "write the fields as a mapping (`extends: NAME`, "
                                             "`backend: ...`)",
                                             Failure.CONFIG_YAML)])
    return raw


def _read(path: Path, below: tuple[Path, ...]) -> dict[str, Any]:
    raw = _parsed(path)
    reference = raw.pop(EXTENDS, None)
    if reference is None:
        return raw
    if not isinstance(reference, str) or not reference.strip():
        raise ProfileError(str(path), [Issue(
            EXTENDS, f"must be a profile's name or a YAML file's path, not {reference!r}",
            "write extends: NAME (a shipped profile, e.g. extends: rehearsal) or extends: "
            "FILE.yaml (beside this file)", Failure.CONFIG_EXTENDS)])
    base = base_path(reference.strip(), path)
    if symlink_loop(base):
        raise ProfileError(str(path), [loop_issue(base, EXTENDS)])
    base = base.resolve()
    chain = (*below, path.resolve())
    if base.resolve() in chain:
        names = " → ".join(p.name for p in (*chain, base))
        raise ProfileError(str(path), [Issue(
            EXTENDS, f"makes a loop: {names}",
            "let one of these files name no base (remove its extends)", Failure.CONFIG_EXTENDS)])
    if len(chain) > MAX_BASES:
        raise ProfileError(str(path), [Issue(
            EXTENDS, f"is the {len(chain) + 1}th profile of one chain (at most {MAX_BASES + 1})",
            "extend the base of your base directly, or copy the fields you need",
            Failure.CONFIG_EXTENDS)])
    if not base.is_file():
        raise ProfileError(str(path), [Issue(
            EXTENDS, f"names {reference!r}, and there is no file at {base}",
            f"use one of the shipped profiles ({', '.join(profile_names())}) or the path of a YAML "
            "file beside this one", Failure.CONFIG_NOT_FOUND)])
    inherited = _read(base, chain)
    inherited.pop(NAME, None)  # the base's name is the base's own
    return merged(anchor_recipe_paths(inherited, base.parent), raw)
