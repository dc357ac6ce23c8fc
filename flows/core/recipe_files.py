"""The recipe as what a program gets: the files it ships, the arguments that name them, and the
digest that keys the training by their content.

Why content, not paths: a team edits its reward file in place. Keyed by its path, a changed
reward would be skipped as "already trained"; keyed by its bytes, it trains again, and an
unchanged file skips whatever it is called.

Where the files are: the rehearsal runs them where they are (its programs see the machine's
files); GKE ships them beside the evaluation program in the workload's immutable ConfigMap,
named by content and mounted read-only (flows/backends/gke/jobs/program_files.py), so
``program_dir`` is that mount there. Each file travels under a name of its role, so two teams'
``rewards.py`` never meet and the arguments never depend on the owner's file names.

Why a guard in front of the reward functions: MaxText loads ``reward_functions`` by name from
the file ``reward_functions_path`` names (``utils_rl.load_custom_callable``), and Tunix sums
whatever they return (``SequenceRewardManager``), raising only for None or a list of the
wrong length. The guard (images/rehearsal/reward_guard.py) is that file: it loads the team's
file, hands MaxText each function wrapped so that one raising or returning anything but one
finite number per completion stops the program on a marked line naming the function, which
the train and evaluate stages read as the user's error (never retried).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from flows.common.paths import REPO_ROOT, REWARD_GUARD, content_digest, file_digest
from flows.config.profile import Profile
from flows.config.recipe import (
    PROCESSOR_ARG,
    REWARDS_FILE_ARG,
    REWARDS_FILE_ENV,
    REWARDS_NAMES_ARG,
    REWARDS_NAMES_ENV,
    TEMPLATE_ARG,
    recipe_path,
)
from flows.core.workload import ProgramFile

GUARD_PROGRAM = REWARD_GUARD
# what the guard reads (REWARDS_FILE_ENV, REWARDS_NAMES_ENV) is named in flows/config/recipe.py
# the marked line the guard prints before it stops the program
REWARD_ERROR_MARK = "RECIPE-REWARD-ERROR"
# the line the guard announces its process's token on; a mark counts only with that token
REWARD_GUARD_ANNOUNCE = "RECIPE-REWARD-GUARD"
# the names the files travel under (GKE's ConfigMap keys)
SHIPPED_NAMES = {"rewards": "recipe_rewards.py", "dataset_processor": "recipe_processor.py",
                 "chat_template": "recipe_template.json"}
BUILTIN = "builtin"
FIELD_OF_ROLE = {"rewards": "recipe.rewards.file", "dataset_processor": "recipe.dataset_processor",
                 "chat_template": "recipe.chat_template"}


@dataclass(frozen=True)
class RecipeFile:
    """One file of the recipe: its role, where the owner keeps it, and its content's digest."""

    role: str
    path: str  # absolute
    digest: str

    def shipped(self) -> ProgramFile:
        return ProgramFile(name=SHIPPED_NAMES[self.role], source=self.path, digest=self.digest)


def _file(role: str, text: str) -> RecipeFile:
    path = recipe_path(text)
    # never cached: the team edits the file in place, and a long-lived process (a worker
    # serving deployments, a test session) must key each run by the bytes it ships
    return RecipeFile(role=role, path=str(path), digest=content_digest(path))


def recipe_files(profile: Profile) -> tuple[RecipeFile, ...]:
    """The recipe's files in a fixed order (rewards, processor, template); none when the
    recipe is MaxText's built-in one."""
    recipe = profile.recipe
    files = []
    if recipe.rewards is not None:
        files.append(_file("rewards", recipe.rewards.file))
    if recipe.dataset_processor is not None:
        files.append(_file("dataset_processor", recipe.dataset_processor))
    if recipe.chat_template is not None:
        files.append(_file("chat_template", recipe.chat_template))
    return tuple(files)


def guard_file() -> ProgramFile:
    return ProgramFile(name=GUARD_PROGRAM.name, source=str(GUARD_PROGRAM.relative_to(REPO_ROOT)),
                       digest=file_digest(GUARD_PROGRAM))


def recipe_digest(profile: Profile) -> str:
    """What the recipe is, by content: each file's role and bytes, the reward functions'
    names in order, and the guard that calls them. ``builtin`` for MaxText's own recipe."""
    files = recipe_files(profile)
    if not files:
        return BUILTIN
    rewards = profile.recipe.rewards
    parts = [f"{f.role}={f.digest}" for f in files]
    if rewards is not None:
        parts += [f"functions={','.join(rewards.functions)}", f"guard={guard_file().digest}"]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def recipe_key_parts(profile: Profile) -> tuple[str, ...]:
    """The recipe's part of a key: its digest, and nothing for MaxText's built-in recipe, so
    the keys of profiles that name no recipe stay what they were."""
    digest = recipe_digest(profile)
    return () if digest == BUILTIN else (f"recipe={digest}",)


def shipped_files(profile: Profile) -> tuple[ProgramFile, ...]:
    """What a program of the recipe's needs beside the image (the guard with the rewards)."""
    files = [f.shipped() for f in recipe_files(profile)]
    if profile.recipe.rewards is not None:
        files.insert(0, guard_file())
    return tuple(files)


def recipe_args(profile: Profile, program_dir: str | None) -> list[str]:
    """train_rl's arguments for the recipe. ``program_dir``: where the backend puts shipped
    files (None: the files are read where they are, the rehearsal)."""
    def where(file: ProgramFile) -> str:
        if program_dir is None:
            return str(REPO_ROOT / file.source)  # an absolute source stays as it is
        return f"{program_dir}/{file.name}"

    args: list[str] = []
    by_role = {f.role: f.shipped() for f in recipe_files(profile)}
    rewards = profile.recipe.rewards
    if rewards is not None:
        args += [f"{REWARDS_FILE_ARG}={where(guard_file())}",
                 f"{REWARDS_NAMES_ARG}={','.join(rewards.functions)}"]
    if "dataset_processor" in by_role:
        args.append(f"{PROCESSOR_ARG}={where(by_role['dataset_processor'])}")
    if "chat_template" in by_role:
        args.append(f"{TEMPLATE_ARG}={where(by_role['chat_template'])}")
    return args


def recipe_env(profile: Profile, program_dir: str | None) -> tuple[tuple[str, str], ...]:
    """What the guard reads: the team's reward file where the program sees it, and the names."""
    rewards = profile.recipe.rewards
    if rewards is None:
        return ()
    where = (str(recipe_path(rewards.file)) if program_dir is None
             else f"{program_dir}/{SHIPPED_NAMES['rewards']}")
    return ((REWARDS_FILE_ENV, where), (REWARDS_NAMES_ENV, ",".join(rewards.functions)))


def recipe_destinations(profile: Profile, program_dir: str) -> tuple[str, ...]:
    """Where each of the recipe's files is read from and where the program finds it, one
    line each (the plan prints them); none for MaxText's built-in recipe."""
    lines = [f"{FIELD_OF_ROLE[f.role]} {f.path} → {program_dir}/{SHIPPED_NAMES[f.role]}"
             for f in recipe_files(profile)]
    if profile.recipe.rewards is not None:
        lines.append(f"reward_functions_path → {program_dir}/{GUARD_PROGRAM.name}, the guard "
                     f"that loads {program_dir}/{SHIPPED_NAMES['rewards']}")
    return tuple(lines)


def recipe_summary(profile: Profile) -> dict[str, object]:
    """The recipe as the run page, the lineage record and the result show it."""
    rewards = profile.recipe.rewards
    return {"digest": recipe_digest(profile),
            "reward_functions": list(rewards.functions) if rewards else [],
            "files": {f.role: {"path": f.path, "digest": f.digest}
                      for f in recipe_files(profile)}}
