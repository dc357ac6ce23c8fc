"""The three MaxText programs as Workloads: pure functions of the profile, the layout and the
backend's :class:`~flows.core.backend.ProgramRuntime`.

Argument order: what the pipeline derives (model, paths, run name) first, then the profile's
arguments verbatim. Where the program differs by backend (image, model source, launcher,
placement, environment), the runtime answers with one :class:`~flows.core.backend.ProgramSetup`
per program; nothing here branches on the backend. The backend's own arguments
(``ProgramSetup.args``) qualify the model source in convert and export (a hub revision; the
rehearsal's export also names JAX's shared compilation cache) and follow the derived paths in
train (tokenizer and data), and the recipe's arguments come last (flows/core/recipe_files.py). The HF
token is never an argument: MaxText 0.2.4 reads ``HF_TOKEN`` from the environment when
``hf_access_token`` is not given (configs/pyconfig.py), so the token travels only as a
secret-backed environment variable.
"""

from __future__ import annotations

from flows.config.profile import Profile
from flows.core.backend import ProgramRuntime, ProgramSetup
from flows.core.layout import Layout
from flows.core.recipe_files import recipe_args, recipe_env, shipped_files
from flows.core.storage import program_path
from flows.core.workload import Workload, render_args

TO_MAXTEXT = "maxtext.checkpoint_conversion.to_maxtext"
TRAIN_RL = "maxtext.trainers.post_train.rl.train_rl"

TO_HUGGINGFACE = "maxtext.checkpoint_conversion.to_huggingface"
# Tunix logs "Train step N training loss" (one step late) and orbax "Saving checkpoint at
# step N" (every checkpoint_period); whichever comes first moves the progress bar.
STEP_REGEX = r"(?:Train step|Saving checkpoint at step)\s+(?P<step>\d+)"


def _secret_env(profile: Profile) -> tuple:
    token = profile.model.hf_token
    return (("HF_TOKEN", token),) if token is not None else ()


def _entry(setup: ProgramSetup, module: str) -> list[str]:
    return list(setup.launcher) or ["python3", "-m", module]


def train_entry(runtime: ProgramRuntime) -> list[str]:
    """What starts the training program on this backend (its argv before the arguments)."""
    return _entry(runtime.setup("train"), TRAIN_RL)


def convert_workload(profile: Profile, layout: Layout, runtime: ProgramRuntime,
                     image: str | None = None) -> Workload:
    setup = runtime.setup("convert")
    argv = [*_entry(setup, TO_MAXTEXT), f"model_name={profile.model.maxtext_name}",
            f"--hf_model_path={runtime.model().path}", *setup.args,
            f"base_output_directory={program_path(layout.convert_dir)}/",
            *render_args(profile.model.args), *render_args(profile.convert.args)]
    return Workload(name="convert-hf-to-maxtext", image=runtime.image(image), argv=tuple(argv),
                    placement=setup.placement, env=setup.env, secret_env=_secret_env(profile),
                    outputs=(layout.converted_checkpoint,), preamble=setup.preamble)


def train_workload(profile: Profile, layout: Layout, runtime: ProgramRuntime,
                   image: str | None = None) -> Workload:
    setup = runtime.setup("train")
    argv = [*_entry(setup, TRAIN_RL), f"run_name={layout.run_name}",
            f"base_output_directory={program_path(layout.train_base)}/",
            f"model_name={profile.model.maxtext_name}",
            f"load_parameters_path={program_path(layout.converted_checkpoint)}/",
            *setup.args, *render_args(profile.model.args), *render_args(profile.train.args),
            *recipe_args(profile, setup.shipped_dir)]
    steps = profile.train.args.get("num_batches")
    wandb = profile.tracking.wandb
    env, secrets = (*setup.env, *recipe_env(profile, setup.shipped_dir)), _secret_env(profile)
    if wandb is not None:  # tunix's metrics logger writes to W&B itself (docs/integrations/wandb.md)
        offline = str(program_path(layout.train_run_dir)) if profile.backend == "local" else None
        env = (*env, *wandb.environment(layout.run_name, offline).items())
        if wandb.api_key is not None:
            secrets = (*secrets, ("WANDB_API_KEY", wandb.api_key))
    return Workload(name="train-grpo", image=runtime.image(image), argv=tuple(argv),
                    placement=setup.placement, env=env,
                    secret_env=secrets, outputs=(layout.actor_checkpoints,),
                    progress_regex=STEP_REGEX,
                    total_steps=int(steps) if steps is not None else None,
                    preamble=setup.preamble,
                    files=shipped_files(profile) if setup.shipped_dir else ())


def export_workload(profile: Profile, layout: Layout, runtime: ProgramRuntime, step: int,
                    image: str | None = None) -> Workload:
    setup = runtime.setup("export")
    argv = [*_entry(setup, TO_HUGGINGFACE), f"model_name={profile.model.maxtext_name}",
            f"load_parameters_path={program_path(layout.actor_params(step))}/",
            f"base_output_directory={program_path(layout.export_dir)}/",
            # Without it 0.2.4 takes the tokenizer of its built-in HF id for the model
            # (Qwen3-30B-A3B-Thinking-2507), not the one of the model that was trained.
            f"--hf_model_path={setup.tokenizer or runtime.model().path}", *setup.args,
            *render_args(profile.model.args), *render_args(profile.export.args)]
    return Workload(name="export-maxtext-to-hf", image=runtime.image(image), argv=tuple(argv),
                    placement=setup.placement, env=setup.env, secret_env=_secret_env(profile),
                    outputs=(layout.export_dir,), preamble=setup.preamble)
