"""Whether a GKE profile's recipe fits what ships it: one ConfigMap of text, 1 MiB at most.

GKE ships the recipe's files, the guard in front of its rewards and the evaluation program in
one immutable ConfigMap (flows/backends/gke/jobs/program_files.py). Kubernetes refuses a
ConfigMap whose values add up to more than ``core.MaxSecretSize`` (1 MiB: pkg/apis/core/
validation/validation.go ``ValidateConfigMap``), and its ``data`` holds UTF-8 text only. Both
would otherwise be found at submit time, after the image was built and the checkpoint
converted, on a held slice's schedule; measured here they refuse the profile at
`tpurl validate` and `tpurl plan`, naming the file and its size.

The rehearsal reads the files where they are, so only GKE profiles are weighed.
"""

from __future__ import annotations

from pathlib import Path

from flows.common.issues import Issue
from flows.common.paths import EVAL_PROGRAM, REWARD_GUARD, SERVED_CLIENT
from flows.config.limits import limits
from flows.config.profile import Profile
from flows.config.recipe import recipe_path

CONFIGMAP_MAX_BYTES = 1024 * 1024  # the sum of a ConfigMap's values (core.MaxSecretSize)


def _recipe_fields(profile: Profile) -> dict[str, str]:
    """The recipe's files by their dotted profile field (unset ones left out)."""
    recipe = profile.recipe
    named = {"recipe.rewards.file": recipe.rewards.file if recipe.rewards else None,
             "recipe.dataset_processor": recipe.dataset_processor,
             "recipe.chat_template": recipe.chat_template}
    return {field: text for field, text in named.items() if text is not None}


def companions(profile: Profile) -> tuple[Path, ...]:
    """Our own programs that travel in the same ConfigMap as the recipe's largest set (the
    evaluation's, when the profile evaluates; a watch's with a canary adds its client)."""
    ours = []
    if profile.recipe.rewards is not None:
        ours.append(REWARD_GUARD)
    if profile.eval is not None:
        ours.append(EVAL_PROGRAM)
    if profile.watch is not None and profile.watch.canary is not None:
        ours.append(SERVED_CLIENT)  # beside the evaluation program in the watch's JobSet
    return tuple(ours)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:  # the recipe's own validation has named a missing file already
        return 0


@limits({field: "on GKE: UTF-8 text; with the other shipped files at most 1 MiB (a "
                "ConfigMap's data)" for field in ("recipe.rewards.file", "recipe.dataset_processor",
                                                 "recipe.chat_template")})
def recipe_limit_issues(profile: Profile) -> list[Issue]:
    """A GKE profile's recipe files that are not UTF-8 text, and, when the ConfigMap would be
    over its limit, one issue at the largest file naming every file's size."""
    if profile.gke is None:
        return []
    files = {field: recipe_path(text) for field, text in _recipe_fields(profile).items()}
    issues = []
    for field, path in files.items():
        try:
            path.read_bytes().decode("utf-8")
        except UnicodeDecodeError as exc:
            issues.append(Issue(field, f"{str(path)!r} is not UTF-8 text (byte {exc.start}); "
                                "GKE ships the recipe in a ConfigMap, which holds text only",
                                "save the file as UTF-8"))
        except OSError:
            pass
    if not files:
        return issues
    sizes = {field: _size(path) for field, path in files.items()}
    ours = {path.name: _size(path) for path in companions(profile)}
    total = sum(sizes.values()) + sum(ours.values())
    if total <= CONFIGMAP_MAX_BYTES:
        return issues
    largest = max(sizes, key=lambda field: sizes[field])
    others = [f"{field} {size:,}" for field, size in sizes.items() if field != largest]
    others += [f"{name} {size:,}" for name, size in ours.items()]
    budget = CONFIGMAP_MAX_BYTES - sum(ours.values())
    issues.append(Issue(
        largest, f"{str(files[largest])!r} is {sizes[largest]:,} bytes; with "
        f"{', '.join(others) if others else 'nothing else'} the ConfigMap that ships the "
        f"recipe to GKE would hold {total:,} bytes, over Kubernetes' {CONFIGMAP_MAX_BYTES:,} "
        "(1 MiB)", f"keep the recipe's files under {budget:,} bytes together: read large "
        "data (tables, word lists) from the dataset or the image, not from the recipe's files"))
    return issues
