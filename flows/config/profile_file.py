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
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from flows.common.issues import Issue
from flows.common.paths import PROFILES_DIR
from flows.common.yaml_text import load_yaml
from flows.config.errors import ProfileError
from flows.config.recipe import anchor_recipe_paths

EXTENDS = "extends"
# A chain longer than this is a design mistake, not a need: each level is a file to read to
# know what runs.
MAX_BASES = 4


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
    file that names it, else a shipped profile's name."""
    if reference.endswith((".yaml", ".yml")):
        return (child.parent / reference).resolve()
    return PROFILES_DIR / f"{reference}.yaml"


def _parsed(path: Path) -> dict[str, Any]:
    try:
        raw = load_yaml(path.read_text())
    except yaml.YAMLError as exc:
        raise ProfileError(str(path), [Issue("profile", f"is not valid YAML: {exc}",
                                             "fix the YAML syntax at the position shown",
                                             "config/yaml")]) from None
    if not isinstance(raw, dict):
        raise ProfileError(str(path), [Issue("profile", "is not a mapping of fields",
                                             "start the file with `name: ...`",
                                             "config/yaml")])
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
            "FILE.yaml (beside this file)", "config/extends")])
    base = base_path(reference.strip(), path)
    chain = (*below, path.resolve())
    if base.resolve() in chain:
        names = " → ".join(p.name for p in (*chain, base))
        raise ProfileError(str(path), [Issue(
            EXTENDS, f"makes a loop: {names}",
            "let one of these files name no base (remove its extends)", "config/extends")])
    if len(chain) > MAX_BASES:
        raise ProfileError(str(path), [Issue(
            EXTENDS, f"is the {len(chain) + 1}th profile of one chain (at most {MAX_BASES + 1})",
            "extend the base of your base directly, or copy the fields you need",
            "config/extends")])
    if not base.is_file():
        raise ProfileError(str(path), [Issue(
            EXTENDS, f"names {reference!r}, and there is no file at {base}",
            f"use one of the shipped profiles ({', '.join(profile_names())}) or the path of a YAML "
            "file beside this one", "config/not-found")])
    return merged(anchor_recipe_paths(_read(base, chain), base.parent), raw)
