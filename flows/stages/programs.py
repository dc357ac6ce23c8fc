"""The three MaxText programs as Workloads: pure functions of the profile and the layout.

Argument order: what the pipeline derives (model, paths, run name) first, then the profile's
arguments verbatim. The HF token is never an argument: MaxText 0.2.4 reads ``HF_TOKEN`` from
the environment when ``hf_access_token`` is not given (configs/pyconfig.py), so the token
travels only as a secret-backed environment variable.
"""

from __future__ import annotations

from urllib.parse import urlparse

from flows.config.profile import Profile
from flows.core.layout import Layout, patched_image_ref
from flows.core.paths import REHEARSAL_DIR, REPO_ROOT
from flows.core.workload import Placement, Workload, render_args

TO_MAXTEXT = "maxtext.checkpoint_conversion.to_maxtext"
TRAIN_RL = "maxtext.trainers.post_train.rl.train_rl"
TO_HUGGINGFACE = "maxtext.checkpoint_conversion.to_huggingface"
REHEARSAL_IMAGE = "rehearsal-venv"
HF_CHECK_IMAGE = "hf-check-venv"
# Tunix logs "Train step N training loss" (one step late) and orbax "Saving checkpoint at
# step N" (every checkpoint_period); whichever comes first moves the progress bar.
STEP_REGEX = r"(?:Train step|Saving checkpoint at step)\s+(?P<step>\d+)"

# On GKE the training container raises its memory cgroup (the head pod's default is too
# small for the checkpoint restore) and gives vLLM its host address, as the tutorial does.
TRAIN_PREAMBLE = (
    "(echo 190G > /sys/fs/cgroup/memory.max || "
    "echo 190G > /sys/fs/cgroup/memory/memory.limit_in_bytes) 2>/dev/null || true",
    "export VLLM_HOST_IP=$(hostname -I | awk '{print $1}')",
    "export VLLM_ENABLE_V1_MULTIPROCESSING=0",
)


def program_path(uri: str) -> str:
    """MaxText takes local directories as plain paths and GCS locations as gs:// URIs."""
    parsed = urlparse(uri)
    return parsed.path if parsed.scheme == "file" else uri


def _image(profile: Profile, built: str | None = None) -> str:
    """The rehearsal venv locally; on GKE the image stage's pushed digest (the tag in plans)."""
    if profile.backend == "local":
        return REHEARSAL_IMAGE
    return built or patched_image_ref(profile)


def _secret_env(profile: Profile) -> tuple:
    token = profile.model.hf_token
    return (("HF_TOKEN", token),) if token is not None else ()


def _cpu_placement() -> Placement:
    return Placement(kind="cpu")


def _hf_source(profile: Profile, layout: Layout) -> str:
    return program_path(layout.tiny_model_dir) if profile.backend == "local" else profile.model.hf_repo


def convert_workload(profile: Profile, layout: Layout, image: str | None = None) -> Workload:
    argv = ["python3", "-m", TO_MAXTEXT, f"model_name={profile.model.maxtext_name}",
            f"--hf_model_path={_hf_source(profile, layout)}"]
    if profile.backend == "gke":
        argv.append(f"--revision={profile.model.hf_revision}")
    argv += [f"base_output_directory={program_path(layout.convert_dir)}/",
             *render_args(profile.model.args), *render_args(profile.convert.args)]
    return Workload(name="convert-hf-to-maxtext", image=_image(profile, image), argv=tuple(argv),
                    placement=_cpu_placement(), env=_local_env(profile),
                    secret_env=_secret_env(profile), outputs=(layout.converted_checkpoint,))


def train_workload(profile: Profile, layout: Layout, image: str | None = None) -> Workload:
    if profile.backend == "local":
        entry = ["python3", str((REHEARSAL_DIR / "train_rl_cpu.py").relative_to(REPO_ROOT))]
        data = [f"hf_train_files={program_path(profile.data.train_files or layout.dataset_file)}",
                f"tokenizer_path={program_path(layout.tiny_model_dir)}"]
        placement = _cpu_placement()
        env = _local_env(profile)
        preamble: tuple[str, ...] = ()
    else:
        assert profile.gke is not None
        entry = ["python3", "-m", TRAIN_RL]
        data = [f"tokenizer_path={profile.model.hf_repo}"]
        if profile.data.train_files:
            data.append(f"hf_train_files={profile.data.train_files}")
        placement = Placement(kind="pathways", topology=profile.gke.topology,
                              machine_type=profile.gke.machine_type,
                              num_slices=profile.gke.num_slices, chips=profile.gke.total_chips)
        env = (("JAX_PLATFORMS", "proxy,cpu"), ("ENABLE_PATHWAYS_PERSISTENCE", "1"))
        preamble = TRAIN_PREAMBLE
    argv = [*entry, f"run_name={layout.run_name}",
            f"base_output_directory={program_path(layout.train_base)}/",
            f"model_name={profile.model.maxtext_name}",
            f"load_parameters_path={program_path(layout.converted_checkpoint)}/",
            *data, *render_args(profile.model.args), *render_args(profile.train.args)]
    steps = profile.train.args.get("num_batches")
    return Workload(name="train-grpo", image=_image(profile, image), argv=tuple(argv),
                    placement=placement, env=env, secret_env=_secret_env(profile),
                    outputs=(layout.actor_checkpoints,), progress_regex=STEP_REGEX,
                    total_steps=int(steps) if steps is not None else None, preamble=preamble)


def export_workload(profile: Profile, layout: Layout, step: int,
                    image: str | None = None) -> Workload:
    argv = ["python3", "-m", TO_HUGGINGFACE, f"model_name={profile.model.maxtext_name}",
            f"load_parameters_path={program_path(layout.actor_params(step))}/",
            f"base_output_directory={program_path(layout.export_dir)}/",
            # Without it 0.2.4 takes the tokenizer of its built-in HF id for the model
            # (Qwen3-30B-A3B-Thinking-2507), not the one of the model that was trained.
            f"--hf_model_path={_hf_source(profile, layout)}",
            *render_args(profile.model.args), *render_args(profile.export.args)]
    return Workload(name="export-maxtext-to-hf", image=_image(profile, image), argv=tuple(argv),
                    placement=_cpu_placement(), env=_local_env(profile),
                    secret_env=_secret_env(profile), outputs=(layout.export_dir,))


def hf_check_workload(profile: Profile, layout: Layout) -> Workload:
    argv = ["python3", str((REHEARSAL_DIR / "check_hf_export.py").relative_to(REPO_ROOT)),
            "--export", program_path(layout.export_dir),
            "--original", program_path(layout.tiny_model_dir)]
    return Workload(name="verify-hf-export-loads", image=HF_CHECK_IMAGE, argv=tuple(argv),
                    placement=_cpu_placement())


def _local_env(profile: Profile) -> tuple[tuple[str, str], ...]:
    if profile.backend != "local":
        return ()
    return (("JAX_PLATFORMS", "cpu"), ("HF_HUB_OFFLINE", "1"), ("HF_DATASETS_OFFLINE", "1"),
            ("TOKENIZERS_PARALLELISM", "false"))
