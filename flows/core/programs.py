"""The three MaxText programs as Workloads: pure functions of the profile, the layout and the
backend's :class:`~flows.core.backend.ProgramRuntime`.

Argument order: what the pipeline derives (model, paths, run name) first, then the profile's
arguments verbatim. Where the program differs by backend (image, model source, launcher,
placement, environment), the runtime answers; nothing here branches on the backend. The HF
token is never an argument: MaxText 0.2.4 reads ``HF_TOKEN`` from the environment when
``hf_access_token`` is not given (configs/pyconfig.py), so the token travels only as a
secret-backed environment variable.
"""

from __future__ import annotations

from flows.config.profile import Profile
from flows.core.backend import ProgramRuntime
from flows.core.layout import Layout
from flows.core.storage import program_path
from flows.core.workload import Placement, Workload, render_args

TO_MAXTEXT = "maxtext.checkpoint_conversion.to_maxtext"

TO_HUGGINGFACE = "maxtext.checkpoint_conversion.to_huggingface"
# Tunix logs "Train step N training loss" (one step late) and orbax "Saving checkpoint at
# step N" (every checkpoint_period); whichever comes first moves the progress bar.
STEP_REGEX = r"(?:Train step|Saving checkpoint at step)\s+(?P<step>\d+)"


def _secret_env(profile: Profile) -> tuple:
    token = profile.model.hf_token
    return (("HF_TOKEN", token),) if token is not None else ()


def convert_workload(profile: Profile, layout: Layout, runtime: ProgramRuntime,
                     image: str | None = None) -> Workload:
    argv = ["python3", "-m", TO_MAXTEXT, f"model_name={profile.model.maxtext_name}",
            f"--hf_model_path={runtime.model_source()}", *runtime.convert_extra_args(),
            f"base_output_directory={program_path(layout.convert_dir)}/",
            *render_args(profile.model.args), *render_args(profile.convert.args)]
    return Workload(name="convert-hf-to-maxtext", image=runtime.image(image), argv=tuple(argv),
                    placement=Placement(kind="cpu"), env=runtime.program_env(),
                    secret_env=_secret_env(profile), outputs=(layout.converted_checkpoint,))


def train_workload(profile: Profile, layout: Layout, runtime: ProgramRuntime,
                   image: str | None = None) -> Workload:
    argv = [*runtime.train_entry(), f"run_name={layout.run_name}",
            f"base_output_directory={program_path(layout.train_base)}/",
            f"model_name={profile.model.maxtext_name}",
            f"load_parameters_path={program_path(layout.converted_checkpoint)}/",
            *runtime.train_data_args(), *render_args(profile.model.args),
            *render_args(profile.train.args)]
    steps = profile.train.args.get("num_batches")
    return Workload(name="train-grpo", image=runtime.image(image), argv=tuple(argv),
                    placement=runtime.train_placement(), env=runtime.train_env(),
                    secret_env=_secret_env(profile), outputs=(layout.actor_checkpoints,),
                    progress_regex=STEP_REGEX,
                    total_steps=int(steps) if steps is not None else None,
                    preamble=runtime.train_preamble())


def export_workload(profile: Profile, layout: Layout, runtime: ProgramRuntime, step: int,
                    image: str | None = None) -> Workload:
    argv = ["python3", "-m", TO_HUGGINGFACE, f"model_name={profile.model.maxtext_name}",
            f"load_parameters_path={program_path(layout.actor_params(step))}/",
            f"base_output_directory={program_path(layout.export_dir)}/",
            # Without it 0.2.4 takes the tokenizer of its built-in HF id for the model
            # (Qwen3-30B-A3B-Thinking-2507), not the one of the model that was trained.
            f"--hf_model_path={runtime.model_source()}",
            *render_args(profile.model.args), *render_args(profile.export.args)]
    return Workload(name="export-maxtext-to-hf", image=runtime.image(image), argv=tuple(argv),
                    placement=Placement(kind="cpu"), env=runtime.program_env(),
                    secret_env=_secret_env(profile), outputs=(layout.export_dir,))


def planned_workloads(profile: Profile, runtime: ProgramRuntime) -> dict[str, Workload]:
    """The main workload of each program stage as a plan shows it: the image by its content
    tag and, for export, the last configured step (at run time: the newest checkpoint)."""
    layout = Layout(profile)
    step = int(profile.train.args.get("num_batches", 0))
    return {"convert": convert_workload(profile, layout, runtime),
            "train": train_workload(profile, layout, runtime),
            "export": export_workload(profile, layout, runtime, step)}
