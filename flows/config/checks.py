"""Checks that span fields: reserved and secret-looking arguments, patches, MaxText's
start-up rules (flows/config/maxtext_rules.py), the model's conversion both ways
(flows/config/maxtext_models.py) and whether its training fits the slice
(flows/config/fit_rules.py).

Pure functions of a parsed profile returning every issue found, so one `tpurl validate`
shows all problems at once instead of one per try.
"""

from __future__ import annotations

from collections.abc import Iterable

from flows.common.failure_codes import Failure
from flows.common.issues import Issue
from flows.config.data_rules import data_issues
from flows.config.evaluation_rules import evaluation_issues
from flows.config.fit_rules import fit_issues, rollout_issues
from flows.config.gcp_names import looks_like_hf_token
from flows.config.limits import limits
from flows.config.maxtext_keys import maxtext_key_issues
from flows.config.maxtext_models import model_name_issues
from flows.config.maxtext_rules import maxtext_issues
from flows.config.profile import RESERVED_ARGS, Profile, Scalar
from flows.config.recipe_limits import recipe_limit_issues
from flows.config.spend import spend_issues


def profile_issues(profile: Profile, known_patches: Iterable[str]) -> list[Issue]:
    issues: list[Issue] = []
    steps = {"model": profile.model.args, "convert": profile.convert.args,
             "train": profile.train.args, "export": profile.export.args}
    for step, args in steps.items():
        issues += _reserved_and_secret_args(step, args)
    issues += _token_literals(profile.model_dump(mode="json", exclude={
        "model": {"args"}, "convert": {"args"}, "train": {"args"}, "export": {"args"}}), "")
    issues += maxtext_key_issues(profile)
    issues += maxtext_issues(profile)
    issues += model_name_issues(profile)
    issues += fit_issues(profile)
    issues += rollout_issues(profile)
    issues += data_issues(profile)
    issues += _patch_issues(profile, set(known_patches))
    issues += spend_issues(profile)
    issues += evaluation_issues(profile)
    issues += recipe_limit_issues(profile)
    return issues


@limits({"": "no text field holds what looks like a Hugging Face token"})
def _token_literals(value: object, path: str) -> list[Issue]:
    """A token pasted into any text field (a revision, a description, a path) would travel
    into plans, lineage records, command lines and the run's results: refused, unquoted."""
    if isinstance(value, str):
        return [Issue(path, "holds what looks like a Hugging Face token",
                      "remove it, revoke the token, and use model.hf_token",
                      Failure.CONFIG_SECRET_LITERAL)] if looks_like_hf_token(value) else []
    if isinstance(value, dict):
        return [i for k, v in value.items() for i in _token_literals(v, f"{path}.{k}".lstrip("."))]
    if isinstance(value, list):
        return [i for n, v in enumerate(value) for i in _token_literals(v, f"{path}[{n}]")]
    return []


@limits({f"{step}.args": f"none of the keys the pipeline sets ({', '.join(sorted(keys))}); "
                         "no value that looks like a Hugging Face token"
          for step, keys in RESERVED_ARGS.items()})
def _reserved_and_secret_args(step: str, args: dict[str, Scalar]) -> list[Issue]:
    issues = []
    for key, value in args.items():
        path = f"{step}.args.{key}"
        if key in RESERVED_ARGS[step]:
            fix = ("remove it: the token reaches the job from model.hf_token as $HF_TOKEN"
                   if key == "hf_access_token"
                   else "remove it: the pipeline sets it from the stage's inputs and outputs")
            issues.append(Issue(path, "is set by the pipeline, not by the profile", fix))
        elif isinstance(value, str) and looks_like_hf_token(value):
            issues.append(Issue(path, "holds what looks like a Hugging Face token",
                                      "remove it, revoke the token, and use model.hf_token",
                                      Failure.CONFIG_SECRET_LITERAL))
    return issues


@limits({"image.disabled_patches": "each key a patch declared in images/post-training/patches.yaml"})
def _patch_issues(profile: Profile, known: set[str]) -> list[Issue]:
    return [Issue(f"image.disabled_patches.{patch_id}", "names no declared patch",
                        f"use one of: {', '.join(sorted(known))}")
            for patch_id in profile.image.disabled_patches if patch_id not in known]


# Every rule profile_issues applies, each carrying the limits it enforces
# (flows/config/limits.py): docs/reference/profile.md lists them beside their fields, and
# tests/config/test_limits.py fails when profile_issues calls a rule missing here.
RULES = (_reserved_and_secret_args, _token_literals, maxtext_key_issues, maxtext_issues,
         model_name_issues, fit_issues, rollout_issues, data_issues, _patch_issues, spend_issues,
         evaluation_issues, recipe_limit_issues)
