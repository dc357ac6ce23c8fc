"""The team's recipe: its reward functions, its dataset processor and its chat template.

These are the files an RL team changes every week. MaxText 0.2.4's ``train_rl`` takes each of
them by path (``trainers/post_train/rl/train_rl.py``): ``reward_functions_path`` with
``reward_functions`` replaces the built-in reward stack (``build_reward_fns``),
``dataset_processor_path`` names a file whose ``process_data`` replaces the built-in one
(``prepare_datasets``), and ``data_template_path`` names the JSON template a question is
framed with (``instruction_data_processing.load_data_template_from_file``). The profile names
the files; the pipeline ships them to wherever the programs run (flows/core/recipe_files.py)
and keys the training by their content, so a changed reward trains again and an unchanged one
does not.

Every field is optional: an unset one keeps MaxText's built-in part of the recipe (the
tutorial's). The paths are the profile owner's: relative to the profile's own file when the
file is there, else to the current directory (a path given with ``--set``), else to the
repository (``anchor_recipe_paths``). The recipe is never
run-tunable: it is code, and a deployment's run cannot choose code.
"""

from __future__ import annotations

import keyword
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

from pydantic import field_validator

from flows.common.paths import REPO_ROOT
from flows.config.capacity import split_listed
from flows.config.errors import FixableValueError
from flows.config.limits import reshapes
from flows.config.section_base import StrictModel
from flows.config.types import Checked, refusing

# The train_rl arguments a recipe sets: a profile's train.args may not set them as well.
REWARDS_FILE_ARG = "reward_functions_path"
REWARDS_NAMES_ARG = "reward_functions"
PROCESSOR_ARG = "dataset_processor_path"
TEMPLATE_ARG = "data_template_path"
RECIPE_FIELD_OF_ARG = {REWARDS_FILE_ARG: "recipe.rewards.file",
                       REWARDS_NAMES_ARG: "recipe.rewards.functions",
                       PROCESSOR_ARG: "recipe.dataset_processor"}
# What the pipeline gives the reward guard in the program's environment: the team's reward
# file where the program sees it, and the names (images/rehearsal/reward_guard.py). Not
# TPURL_ names: those are the profile's overrides (flows/config/env_overrides.py).
REWARDS_FILE_ENV = "REWARD_GUARD_FILE"
REWARDS_NAMES_ENV = "REWARD_GUARD_FUNCTIONS"
# MaxText reads a data template only from a .json file (load_data_template_from_file returns
# None for any other suffix, and prepare_datasets then stops with "Data template is required").
TEMPLATE_SUFFIX = ".json"
# Tunix 0.1.8 logs each reward function's mean as rewards/<mode>/<its name>, beside its own
# rewards/<mode>/{sum,mean,min,max} (reward_manager.py _calculate_scalar_reward_log_metrics)
# and GRPO's rewards/<mode>/score/* (grpo_learner.py): a function of one of these names would
# overwrite, or be overwritten by, the totals every chart reads.
TAKEN_METRIC_NAMES = frozenset({"sum", "mean", "min", "max", "score"})
# the recipe's paths, as dotted profile fields (what anchor_recipe_paths rewrites)
PATH_FIELDS = (("rewards", "file"), ("dataset_processor",), ("chat_template",))


def recipe_path(text: str) -> Path:
    """Where a recipe file is: an absolute path as given, a relative one under the repository
    (a profile's loader has already anchored the ones that sit beside the profile)."""
    path = Path(text).expanduser()
    return path if path.is_absolute() else REPO_ROOT / path


def _file_problem(text: str, suffixes: tuple[str, ...]) -> str | None:
    path = recipe_path(text)
    if not path.is_file():
        return (f"{text!r} is not a file (looked for {path}; a relative path is read beside "
                "the profile's file, else in the current directory, else in the repository)")
    if path.suffix not in suffixes:
        return f"{text!r} is not a {' or '.join(suffixes)} file"
    return None


def recipe_file(suffix: str, fix: str) -> Checked:
    """An existing file of the team's, found where a profile's relative paths are read."""
    return Checked(refusing(lambda v: _file_problem(v, (suffix,)), fix),
                   f"an existing {suffix} file (beside the profile, in the current directory or "
                   "in the repository)")


def _python_names(v: tuple[str, ...]) -> tuple[str, ...]:
    if not v:
        raise FixableValueError("names no function", "list the reward functions to use: "
                                "recipe.rewards.functions=exact_match,length_penalty")
    bad = [name for name in v if not name.isidentifier() or keyword.iskeyword(name)]
    if bad:
        raise FixableValueError(f"{', '.join(map(repr, bad))} is not a Python function "
                                "name", "name the functions as the file defines them, "
                                "separated by commas: recipe.rewards.functions=a,b")
    if taken := sorted(TAKEN_METRIC_NAMES.intersection(v)):
        raise FixableValueError(f"{', '.join(map(repr, taken))} is the name of a reward total "
                                "Tunix logs (rewards/train/<name>): the function's own curve "
                                "would overwrite it", "rename the function in the file and "
                                "here, e.g. exact_match instead of score")
    if len(set(v)) != len(v):
        raise FixableValueError("names a function twice (its reward would count twice)",
                                "list each function once")
    return v


class RewardsRecipe(StrictModel):
    """The reward functions that replace MaxText's built-in stack, summed per completion."""

    file: Annotated[str, recipe_file(".py", "give the path of your reward file, e.g. "
                                     "recipe.rewards.file=recipes/my_rewards.py")]
    """A Python file of the profile owner's defining the reward functions."""
    functions: Annotated[tuple[str, ...], Checked(
        _python_names, "one or more Python function names, each once, none of "
        f"{', '.join(sorted(TAKEN_METRIC_NAMES))}")]
    """The functions of ``file`` to use, in order (``--set recipe.rewards.functions=a,b``).
    MaxText calls each as ``fn(prompts=..., completions=..., tmvp_config=..., **kwargs)``;
    each returns one number per completion."""


    @field_validator("functions", mode="before")
    @classmethod
    @reshapes("a,b is the list [a, b]")
    def _comma_list(cls, v: object) -> object:
        """``a,b`` (the CLI's and the environment's form) is the list [a, b]."""
        listed = split_listed(v)  # the capacity chain's reading of a list written as text
        return (listed.strip(),) if isinstance(listed, str) else listed



class RecipeSection(StrictModel):
    """A team's own reward functions, dataset processor and chat template (each optional;
    unset keeps MaxText's built-in part)."""

    rewards: RewardsRecipe | None = None
    """Reward functions replacing MaxText's built-in math rewards (unset: the built-in ones)."""
    dataset_processor: Annotated[str, recipe_file(
        ".py", "give the path of your processor, e.g. recipe.dataset_processor=recipes/process.py"
    )] | None = None
    """A Python file defining ``process_data(dataset_name, tokenizer, template, config, x)``,
    which turns a dataset row into a prompt and an answer (unset: MaxText's own)."""
    chat_template: Annotated[str, recipe_file(
        TEMPLATE_SUFFIX, "give the path of your JSON template (MaxText reads only .json), e.g. "
        "recipe.chat_template=recipes/template.json")] | None = None
    """A JSON data template (``SYSTEM_PROMPT`` and ``TEMPLATE``) framing each question
    (unset: ``train.args.data_template_path``, or MaxText's default)."""



    def is_builtin(self) -> bool:
        """Nothing of the team's own: MaxText's built-in recipe (the tutorial's)."""
        return self.rewards is None and self.dataset_processor is None \
            and self.chat_template is None


def recipe_args_problem(args: Mapping[str, object]) -> FixableValueError | None:
    """train.args that name recipe files would reach a pod that cannot see them, and would
    bypass the recipe's key: they are set through ``recipe`` instead. A built-in template
    inside the image (``data_template_path: maxtext/examples/...``) stays an argument; a
    recipe's own template takes its place (``without_replaced_template``)."""
    for arg, field in RECIPE_FIELD_OF_ARG.items():
        if arg in args:
            return FixableValueError("names recipe code the pipeline does not ship (nor key "
                                     "by its content)", f"set {field} instead and remove "
                                     f"train.args.{arg}", field=f"train.args.{arg}")
    return None


def without_replaced_template(data: object) -> object:
    """A profile's raw data with ``train.args.data_template_path`` left out when
    ``recipe.chat_template`` names the team's template: the recipe's template takes the
    profile's place, so a team adds its template to any shipped profile (each names MaxText's
    built-in template) without also removing the profile's. Read before the sections are
    built, so the train key, the rendered arguments and every check see one template."""
    if not isinstance(data, dict):
        return data
    recipe, train = data.get("recipe"), data.get("train")
    template = (recipe.chat_template if isinstance(recipe, RecipeSection)
                else recipe.get("chat_template") if isinstance(recipe, dict) else None)
    if not (isinstance(template, str) and template.strip()) or not isinstance(train, dict):
        return data
    args = train.get("args")
    if not isinstance(args, dict) or TEMPLATE_ARG not in args:
        return data
    kept = {k: v for k, v in args.items() if k != TEMPLATE_ARG}
    return {**data, "train": {**train, "args": kept}}


def anchor_recipe_paths(data: dict[str, Any], profile_dir: Path,
                        cwd: Path | None = None) -> dict[str, Any]:
    """The recipe's relative paths that name a file beside the profile, or else in ``cwd``
    (the current directory), made absolute; the others stay as given (read under the
    repository). So a team keeps its recipe next to its profile wherever that is, a path on
    the command line means what it means in a shell, and the shipped profiles name repository
    files."""
    places = (profile_dir, Path.cwd() if cwd is None else cwd)
    recipe = data.get("recipe")
    if not isinstance(recipe, dict):
        return data
    anchored = dict(recipe)
    for field_path in PATH_FIELDS:
        holder: dict[str, Any] = anchored
        for part in field_path[:-1]:
            inner = holder.get(part)
            if not isinstance(inner, dict):
                break
            holder[part] = holder = dict(inner)
        else:
            value = holder.get(field_path[-1])
            if isinstance(value, str) and value.strip() and not Path(value).expanduser().is_absolute():
                found = next((place / value for place in places
                              if (place / value).is_file()), None)
                if found is not None:
                    holder[field_path[-1]] = str(found.resolve())
    return {**data, "recipe": anchored}
