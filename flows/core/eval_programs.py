"""The evaluation program as Workloads, and the keys and URIs of its scores (pure).

Two scores per run: the trained model's, keyed by the export it belongs to, and the base
model's (the converted checkpoint the run started from), keyed only by what shapes *its*
score: the base checkpoint, the image, the held-out set and the evaluation settings. So the
base score is computed once per base and reused by every run that trains from it, while a
changed eval set changes both keys and reruns only the evaluate stage.

The program gets the training's own arguments (so the reward functions, the data template,
the dataset and its split are the training's), with the pipeline's paths and the
evaluation's size and sampling put in their place.
"""

from __future__ import annotations

from typing import Literal, Protocol, runtime_checkable

from flows.common.paths import EVAL_PROGRAM, REPO_ROOT, file_digest
from flows.config.profile import Profile
from flows.core.backend import ProgramRuntime
from flows.core.layout import Layout, convert_key, dataset_key, export_key, image_key
from flows.core.lineage import config_key
from flows.core.manifest import LOGS_DIR
from flows.core.programs import train_entry, train_workload
from flows.core.recipe_files import recipe_key_parts
from flows.core.storage import join, program_path
from flows.core.workload import ProgramFile, Workload

# The evaluation program serves both backends: the rehearsal runs it from the repository,
# GKE ships it to the pod beside the post-training image (ProgramFile; a ConfigMap there).
# It (EVAL_PROGRAM) stays beside train_rl_cpu.py, whose CPU rollout it installs with --cpu-rollout.
SCORES_FILE = "scores.json"
Which = Literal["base", "trained"]

# train_rl arguments that decide which rows are evaluated and how they are scored; the
# others (learning rate, optimizer, …) only shape the training, so they stay out of the base
# score's key. num_batches/batch_size/train_fraction/num_epoch decide the trained rows the
# overlap check compares against: the trained score's key has them through export_key.
EVAL_ARGS = ("dataset_name", "eval_dataset_name", "hf_eval_files", "eval_split", "train_split",
             "hf_subset", "data_shuffle_seed", "data_template_path", "dataset_processor_path",
             "chat_template", "chat_template_path", "max_prefill_predict_length",
             "max_target_length", "reward_functions_path", "reward_functions",
             "generation_configs", "num_eval_passes", "eval_mode", "test_batch_start_index",
             "eval_make_lst", "eval_corr_lst", "answer_format", "reasoning_start_token",
             "reasoning_end_token", "solution_start_token", "solution_end_token")
# what the pipeline sets on the program's command line instead of the training's value
OVERRIDDEN = frozenset({"run_name", "base_output_directory", "load_parameters_path",
                        "num_test_batches", "eval_batch_size", "eval_sampling_strategy",
                        "eval_interval"})


def eval_program_file() -> ProgramFile:
    """The evaluation program as a file a workload ships (named by its content)."""
    return ProgramFile(name=EVAL_PROGRAM.name, source=str(EVAL_PROGRAM.relative_to(REPO_ROOT)),
                       digest=file_digest(EVAL_PROGRAM))


@runtime_checkable
class EvalRuntime(Protocol):
    """A ProgramRuntime that can run the evaluation program (both shipped backends)."""

    def eval_entry(self, scores_path: str, eval_args: list[str]) -> list[str]:
        """argv up to the training arguments: the program, where it writes, the eval set."""
        ...


def _file_part(value: object) -> object:
    """A repository file named by an argument is keyed by its content, not its name."""
    path = REPO_ROOT / str(value)
    return file_digest(path) if isinstance(value, str) and path.is_file() else value


def _scoring_parts(profile: Profile) -> tuple[object, ...]:
    """The evaluation settings and the training arguments that decide how a row is scored."""
    assert profile.eval is not None
    args = profile.train.args
    picked = {k: _file_part(args[k]) for k in EVAL_ARGS if k in args}
    return profile.eval.model_dump(), picked, file_digest(EVAL_PROGRAM), *recipe_key_parts(profile)


def eval_settings_key(profile: Profile) -> str:
    """The base score's settings: the training dataset is part of them even with a declared
    ``eval.files``, because the program checks those rows against the training rows."""
    settings, picked, program, *recipe = _scoring_parts(profile)
    return config_key("eval-settings", settings, dataset_key(profile), picked, program, *recipe)


def score_key(profile: Profile) -> str:
    """What makes two models' scores comparable: the same held-out rows (the dataset and the
    evaluation settings decide them), scored by the same program, arguments and image. The
    promoted pointer keeps it, so a later run knows whether the promoted model's numbers
    were made on its own held-out set (flows/core/promotion.py). A declared ``eval.files``
    is the same rows whatever the run trains on; without it the rows come from the dataset."""
    assert profile.eval is not None
    rows = profile.eval.files or dataset_key(profile)
    return config_key("eval-score", image_key(profile), rows, *_scoring_parts(profile))


def base_eval_key(profile: Profile) -> str:
    return config_key("eval-base", convert_key(profile), image_key(profile),
                      eval_settings_key(profile))


def trained_eval_key(profile: Profile) -> str:
    return config_key("eval-trained", export_key(profile), base_eval_key(profile))


def eval_dir(layout: Layout, which: Which) -> str:
    key = base_eval_key(layout.profile) if which == "base" else trained_eval_key(layout.profile)
    return join(layout.model_root, "eval", which, key)


def scores_uri(layout: Layout, which: Which) -> str:
    return join(eval_dir(layout, which), SCORES_FILE)


def eval_data_args(profile: Profile) -> list[str]:
    """The declared held-out set, when the profile names one (else MaxText's test split)."""
    ev = profile.eval
    assert ev is not None
    if not ev.files:
        return []
    name = ev.dataset_name or str(profile.train.args.get("dataset_name")
                                  or profile.data.dataset_name or "")
    return ["--eval-files", program_path(ev.files), "--eval-dataset-name", name,
            "--eval-split", ev.split]


def evaluate_workload(profile: Profile, layout: Layout, runtime: ProgramRuntime, which: Which,
                      checkpoint: str, image: str | None = None,
                      out: str | None = None, program_args: tuple[str, ...] = ()) -> Workload:
    """MaxText's evaluation of ``checkpoint`` (a MaxText checkpoint's items or model_params).
    ``out``: where the scores go instead of the stage's keyed directory (a watch's own);
    ``program_args``: more of the program's own options (a watch's serving canary)."""
    assert profile.eval is not None and isinstance(runtime, EvalRuntime)
    train = train_workload(profile, layout, runtime, image)
    skip = len(train_entry(runtime))
    kept = [a for a in train.argv[skip:] if a.split("=", 1)[0] not in OVERRIDDEN]
    out = out or eval_dir(layout, which)
    ev = profile.eval
    argv = [*runtime.eval_entry(program_path(join(out, SCORES_FILE)),
                                [*eval_data_args(profile), *program_args]),
            f"run_name=eval-{which}",
            # MaxText's own tensorboard/checkpoint scaffolding: beside the logs, outside the
            # scores' manifest
            f"base_output_directory={program_path(join(out, LOGS_DIR, 'work'))}/",
            f"load_parameters_path={program_path(checkpoint)}/", *kept,
            f"num_test_batches={ev.batches}", f"eval_sampling_strategy={ev.sampling}",
            *([f"eval_batch_size={ev.batch_size}"] if ev.batch_size else [])]
    return Workload(name=f"evaluate-{which}", image=train.image, argv=tuple(argv),
                    placement=train.placement, env=train.env, secret_env=train.secret_env,
                    outputs=(out,), preamble=train.preamble,
                    files=_merged(runtime.setup("evaluate").files, train.files))


def _merged(*groups: tuple[ProgramFile, ...]) -> tuple[ProgramFile, ...]:
    """The evaluation program and the training's recipe files, each once."""
    seen: dict[str, ProgramFile] = {}
    for group in groups:
        for file in group:
            seen.setdefault(file.name, file)
    return tuple(seen.values())


def planned_eval_workloads(profile: Profile, layout: Layout, runtime: ProgramRuntime,
                           step: int) -> dict[str, Workload]:
    """The evaluate stage's two workloads by name (none without eval, or on a backend that
    cannot run the program)."""
    if profile.eval is None or not isinstance(runtime, EvalRuntime):
        return {}
    base = evaluate_workload(profile, layout, runtime, "base", layout.converted_checkpoint)
    trained = evaluate_workload(profile, layout, runtime, "trained", layout.actor_params(step))
    return {base.name: base, trained.name: trained}
