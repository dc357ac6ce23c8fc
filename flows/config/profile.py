"""The profile: everything one pipeline needs, as frozen pydantic models.

Field names follow the tutorial's variables (project, region, zone, cluster, bucket, topology,
...) so a reader of the tutorial finds them. Step arguments (`convert.args`, `train.args`,
`export.args`) are kept as ordered MaxText ``key=value`` pairs rather than re-typed fields:
they are passed through verbatim, and the checks that matter (parallelism, GRPO group size,
learning rate) read them by their MaxText names.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Literal, Self

from pydantic import Field, model_validator

from flows.common.ownership import place_problem
from flows.common.paths import (
    HF_CHECK_LOCK,
    REHEARSAL_DIR,
    REHEARSAL_LOCK,
    REHEARSAL_SCRIPTS,
    TUNIX_GITHUB_FILE,
    file_digest,
    file_uri,
    repo_relative,
    tool_places,
)
from flows.config import gcp_names as names
from flows.config.announcements import AnnouncementsSection
from flows.config.errors import FixableValueError
from flows.config.evaluation import EvalSection, PromotionRule
from flows.config.gke import GkeSection
from flows.config.health import HealthSection
from flows.config.limits import limits, reshapes
from flows.config.notify import NotifySection
from flows.config.recipe import RecipeSection, recipe_args_problem, without_replaced_template
from flows.config.rehearsal_models import REHEARSAL_MODELS
from flows.config.secret_ref import SecretRef
from flows.config.section_base import StrictModel, run_tunable
from flows.config.tracking import TrackingSection
from flows.config.types import Checked
from flows.config.watch import WatchSection

Scalar = str | int | float | bool
_PROFILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")

# Arguments the pipeline computes from stage outputs (or from the secret): a profile that
# sets them would silently fight the pipeline, so they are rejected.
_ALWAYS = frozenset({"model_name", "hf_access_token", "base_output_directory", "run_name",
                     "load_parameters_path", "--hf_model_path"})
RESERVED_ARGS: dict[str, frozenset[str]] = {
    "model": _ALWAYS | {"hf_train_files", "tokenizer_path"},
    "convert": _ALWAYS,
    "train": _ALWAYS | {"hf_train_files", "tokenizer_path"},
    "export": _ALWAYS,
}


def _scalar_args(value: object) -> object:
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, dict | list) or item is None:
                raise FixableValueError(
                    f"argument {key!r} has a {type(item).__name__} value; MaxText arguments "
                    "are single values", f"write it as one string, e.g. {key}: '...'")
    return value



def _token_is_reference(value: object) -> object:
    if isinstance(value, str):
        live = names.looks_like_hf_token(value)
        leaked = " It looks like a live token: revoke it on the hub." if live else ""
        raise FixableValueError(
            "the token must be given as a reference, never as a literal value." + leaked,
            "write {env: HF_TOKEN} or {secret_block: NAME} and put the value there")
    return value


def _pinned(value: str) -> str:
    if "@sha256:" not in value and ":" not in value.rsplit("/", 1)[-1]:
        raise FixableValueError(f"image {value!r} has no tag or digest (it would mean :latest)",
                                "pin it, e.g. ...tpu_post_training:0.2.4 or @sha256:...")
    return value


def _reasons(value: dict[str, str]) -> dict[str, str]:
    for patch_id, reason in value.items():
        if len(reason.strip()) < MIN_REASON:
            raise FixableValueError(f"patch {patch_id!r} is disabled without a reason",
                                    "say why in a sentence: disabled_patches: {ID: 'why'}")
    return value


def _known_builder(value: object) -> object:
    if value not in IMAGE_BUILDERS:
        raise FixableValueError(f"unknown image builder {value!r}",
                                "use auto (the default), docker or cloud-build")
    return value


def _profile_name(value: str) -> str:
    """The name becomes a directory (tpurl-results/NAME), a lock and a label: one safe path
    part, never ../ or a slash."""
    if not _PROFILE_NAME.fullmatch(value):
        raise FixableValueError(f"{value!r} is not a profile name: letters, digits, '.', '_' "
                                "and '-', starting with a letter or digit",
                                "name it like the file, e.g. name: my-qwen3-run")
    return value


MIN_REASON = 10  # characters: a sentence, not "broken" or "n/a"
IMAGE_BUILDERS = ("auto", "docker", "cloud-build")
ImageBuilder = Literal["auto", "docker", "cloud-build"]
# MaxText's arguments, key=value on its command line
ScalarArgs = Annotated[dict[str, Scalar], Checked(
    _scalar_args, "every value a single string, number or boolean (no list, map or null)",
    before=True)]
HfTokenRef = Annotated[SecretRef | None, Checked(
    _token_is_reference, "a reference ({env: NAME}, {secret_block: NAME} or {gcp_secret: "
    "NAME}), never the token", before=True)]

class LocalSection(StrictModel):
    """The rehearsal: CPU, local directories, the real MaxText programs in their own venv."""

    root: str = ".tpurl/rehearsal"
    """Where the rehearsal's outputs, records and logs go; inside the repository, the cache
    or the temp directory."""
    venv: str = ".venvs/rehearsal"
    """The venv that stands in for the post-training image (MaxText, tunix, the patches)."""
    hf_check_venv: str = ".venvs/hf-check"
    """The venv that loads the export with transformers (the export's check)."""
    venv_python: str = "3.12"
    """The Python version of the rehearsal venv (MaxText 0.2.4 needs 3.12)."""
    hf_check_python: str = "3.11"
    """The Python version of the export check's venv."""
    # the rehearsal's generated model and data: training knobs a run may change
    tiny_model_seed: int = run_tunable(0, ge=0)
    """The seed of the tiny model (model.maxtext_name's structure) the infra stage generates."""
    dataset_rows: int = run_tunable(64, ge=4)
    """Rows of the generated OpenMathInstruct-2-shaped dataset."""
    dataset_seed: int = run_tunable(0, ge=0)
    """The seed of the generated dataset."""
    step_timeout_s: int = Field(1800, ge=60)
    """Seconds a rehearsal program may run before it is stopped as stalled."""

    @model_validator(mode="after")
    @limits({place: "inside the repository, the cache directory or the temporary directory"
             for place in ("root", "venv", "hf_check_venv")})
    def _own_places(self) -> Self:
        """The tool creates, rewrites and deletes files under these three: each must lie
        inside the repository, the cache or the temporary directory (
        ``venv: ~`` would have had the image stage delete the home directory)."""
        problems = [FixableValueError(problem, f"give local.{field} a path inside the "
                                      f"repository (the default is {default!r}), or under "
                                      "the cache directory (TPURL_CACHE_DIR)", field=field)
                    for field, default in (("root", ".tpurl/rehearsal"),
                                           ("venv", ".venvs/rehearsal"),
                                           ("hf_check_venv", ".venvs/hf-check"))
                    if (problem := place_problem(repo_relative(getattr(self, field)),
                                                 tool_places()))]
        if problems:
            first, *rest = problems
            raise FixableValueError(first.problem, first.fix, first.field, tuple(rest))
        return self

    # What the rehearsal's outputs and keys are made of (flows/core/layout.py chains them; the
    # gke section answers the same questions for GKE).
    def output_root(self) -> str:
        return file_uri(repo_relative(self.root))

    def runtime_identity(self, base_image: str) -> str:
        """The MaxText code that runs is the one the rehearsal lock pins, not a base image."""
        return (f"rehearsal-lock:{file_digest(REHEARSAL_LOCK)}"
                f"+{file_digest(TUNIX_GITHUB_FILE)}")

    def image_key_parts(self) -> list[object]:
        """The rehearsal's "image" also holds the export checker's venv and our scripts."""
        return [file_digest(HF_CHECK_LOCK),
                *(file_digest(REHEARSAL_DIR / name) for name in REHEARSAL_SCRIPTS)]

    def infra_key_parts(self, maxtext_name: str) -> tuple[object, ...]:
        """The tiny model is the named model's structure (images/rehearsal/make_tiny_model.py)."""
        return ("infra-local", maxtext_name, self.tiny_model_seed, self.dataset_rows,
                self.dataset_seed,
                file_digest(REHEARSAL_DIR / "make_tiny_model.py"),
                file_digest(REHEARSAL_DIR / "make_dataset.py"))

    def model_seed(self) -> int | None:
        return self.tiny_model_seed  # the tiny model is generated from it

    def dataset_key_parts(self) -> tuple[object, ...] | None:
        return ("data", self.dataset_rows, self.dataset_seed)  # the generated dataset


class ModelSection(StrictModel):
    maxtext_name: str
    """MaxText's name of the model (its `model_name`, e.g. qwen3-30b-a3b)."""
    hf_repo: str
    """The Hugging Face repository of the base model."""
    hf_revision: str = run_tunable("main")
    """The base model's revision on the hub: what a base-model announcement carries (a
    40-hex commit there)."""
    hf_token: HfTokenRef = None
    """Where the hub token comes from (env, secret_block or gcp_secret), never the token."""
    args: ScalarArgs = Field(default_factory=dict)
    """Arguments every MaxText program of this model gets (e.g. the rehearsal's tiny sizes)."""





class ImageSection(StrictModel):
    base: Annotated[str, Checked(_pinned, "pinned by a tag or an @sha256: digest (never an implied :latest)")]
    """The post-training image the patched image is built FROM, pinned by tag or digest."""
    repository: str | None = None
    """Where the patched image is pushed (an Artifact Registry repository); GKE only."""
    disabled_patches: Annotated[dict[str, str], Checked(
        _reasons, f"each patch with a reason of at least {MIN_REASON} characters")] = Field(
        default_factory=dict)
    """Declared patches (images/post-training/patches.yaml) left out, each with the reason."""
    # GKE only: who builds the patched image. ``docker``: the Docker SDK against a daemon
    # (DOCKER_HOST or the local socket); ``cloud-build``: Google Cloud Build through its client
    # library, no daemon needed (a Kubernetes work pool's pod has none); ``auto``: docker when a
    # daemon answers at the flow's start, else cloud-build (flows/backends/gke/image/builder.py).
    builder: Annotated[ImageBuilder, Checked(_known_builder, before=True)] = "auto"
    """Who builds the patched image on GKE: docker, cloud-build, or auto (docker when a
    daemon answers, else Cloud Build)."""





class StepSection(StrictModel):
    args: ScalarArgs = Field(default_factory=dict)
    """The MaxText program's own arguments (key=value), checked against its known keys."""


# train_rl's numeric knobs (MaxText 0.2.4 names, flows/config/maxtext_keys.json): a run may
# change these; the other arguments name files, code, templates and parallelism.
TUNABLE_TRAIN_ARGS = (
    "learning_rate", "learning_rate_schedule_steps", "warmup_steps_fraction", "num_batches",
    "num_epoch", "batch_size", "train_micro_batch_size", "max_prefill_predict_length",
    "max_target_length", "checkpoint_period", "num_test_batches",
    "gradient_clipping_threshold", "adam_b1", "adam_b2", "adam_weight_decay",
    "decode_sampling_temperature", "decode_sampling_top_k", "decode_sampling_nucleus_p",
    "rl.num_generations", "rl.num_iterations", "rl.grpo_beta", "rl.grpo_epsilon",
    "rl.epsilon_high")


class TrainSection(StepSection):
    """The training step: its arguments, of which the knobs above are run-tunable."""

    args: ScalarArgs = run_tunable(default_factory=dict, keys=TUNABLE_TRAIN_ARGS)
    """train_rl's arguments; a deployment's run may change only the numeric knobs
    (TUNABLE_TRAIN_ARGS)."""


class DataSection(StrictModel):
    """Training data beyond what the args name: a file set announced by a dataset event.

    ``train_files`` becomes MaxText's ``hf_train_files`` (gs://…, hf://datasets/…, or a local
    parquet path in the rehearsal). Give a versioned URI (a new object per dataset version):
    it is part of the training key, so a new URI retrains and an unchanged one skips.
    """

    train_files: str | None = run_tunable(None)
    """The training files (MaxText's hf_train_files): what a dataset announcement carries."""
    dataset_name: str | None = run_tunable(None)
    """What the files hold, as MaxText names it (answer extraction, the eval split); used
    only with train_files."""


class Profile(StrictModel):
    name: Annotated[str, Checked(_profile_name, "letters, digits, '.', '_' and '-', starting with "
                                 "a letter or digit", pattern=_PROFILE_NAME)]
    """The profile's name: its lock, its labels and its results directory."""
    description: str = ""
    """One line for people: what this profile is for."""
    backend: Literal["gke", "local"]
    """gke runs on a GKE TPU slice; local runs the CPU rehearsal."""
    gke: GkeSection | None = None
    """The GKE backend's settings (required with backend: gke)."""
    local: LocalSection | None = None
    """The rehearsal's settings (required with backend: local)."""
    model: ModelSection
    """The base model and how the hub is reached."""
    image: ImageSection
    """The post-training image and its declared patches."""
    convert: StepSection = StepSection()
    """The Hugging Face → MaxText conversion (to_maxtext)."""
    train: TrainSection = TrainSection()
    """GRPO training (train_rl)."""
    export: StepSection = StepSection()
    """The MaxText → Hugging Face export (to_huggingface)."""
    data: DataSection = DataSection()
    """Training data given as files (announced datasets)."""
    recipe: RecipeSection = RecipeSection()
    """The team's reward functions, dataset processor and chat template (unset: MaxText's
    built-in recipe); fixed by the deployment, like the image."""
    announcements: AnnouncementsSection = AnnouncementsSection()
    """Where announced datasets may come from (never run-tunable)."""
    flow_timeout_s: float | None = Field(None, gt=0)
    """The most one run may take once it holds the profile's lock; unset: the sum of its
    stages' bounds, retries included."""
    eval: EvalSection | None = None
    """The evaluate stage and the promotion decision run when this is set."""
    promotion: PromotionRule | None = None
    """How a trained model is judged (default when eval is set: PromotionRule())."""
    tracking: TrackingSection = TrackingSection()
    """Experiment trackers the run also reports to (MLflow, W&B, Vertex AI TensorBoard);
    none by default."""
    notify: NotifySection | None = None
    """Messages on the events that matter, through a Prefect notification block (off when
    unset; the deploy creates the automations)."""
    health: HealthSection = HealthSection()
    """What each training-health detector's finding does: warn, hold the promotion (the
    default) or stop the training; never silent."""
    watch: WatchSection | None = None
    """The champion scored again after promotion, and rolled back on a significant drop
    (`tpurl watch`; needs eval)."""


    @model_validator(mode="before")
    @classmethod
    @reshapes("recipe.chat_template takes the place of train.args.data_template_path")
    def _recipe_template_replaces_the_argument(cls, data: object) -> object:
        return without_replaced_template(data)

    @model_validator(mode="after")
    @limits({"train.args": "no reward_functions_path, reward_functions or "
                           "dataset_processor_path (the recipe's fields set them); "
                           "data_template_path gives way to recipe.chat_template"})
    def _recipe_only_in_recipe(self) -> Self:
        if problem := recipe_args_problem(self.train.args):
            raise problem
        return self

    @model_validator(mode="after")
    @limits({"gke": "required with backend: gke, not with local",
             "local": "required with backend: local, not with gke",
             "model.hf_token": "required with backend: gke",
             "tracking.wandb.mode": "not offline with backend: gke",
             "image.builder": "auto with backend: local"})
    def _backend_sections(self) -> Self:
        if self.gke is not None and self.local is not None:
            other = "local" if self.backend == "gke" else "gke"
            raise FixableValueError(f"backend {self.backend!r} takes one backend section, and "
                                    f"this profile also has a {other} section",
                                    f"remove the {other}: section (or set backend: {other} and "
                                    f"remove the {self.backend}: section)", field=other)
        if self.backend == "gke" and self.gke is None:
            raise FixableValueError("backend 'gke' needs a gke section (project, region, zone, "
                                    "cluster, bucket, reservation)",
                                    "add the gke: section or use backend: local", field="gke")
        if self.backend == "local" and self.local is None:
            raise FixableValueError("backend 'local' needs a local section", "add `local: {}`",
                                    field="local")
        if self.backend == "gke" and self.model.hf_token is None:
            raise FixableValueError("the GKE jobs download from the hub and need a token",
                                    "write hf_token: {env: HF_TOKEN} or {secret_block: NAME}",
                                    field="model.hf_token")
        wandb = self.tracking.wandb
        if self.backend == "gke" and wandb is not None and wandb.mode == "offline":
            # offline, wandb writes its run under the training pod's working directory; the
            # pod and its files go with the job, so on GKE nothing would be kept
            raise FixableValueError("W&B offline mode on GKE writes the run inside the "
                                    "training pod, which is deleted with its job",
                                    "set tracking.wandb.mode: online with "
                                    "tracking.wandb.api_key, or keep offline runs to the "
                                    "rehearsal (backend: local)", field="tracking.wandb.mode")
        if self.backend == "local" and self.image.builder != "auto":
            # cloud-build needs the gke section's project and region; the rehearsal builds a venv
            raise FixableValueError(f"image.builder {self.image.builder!r} applies to the gke "
                                    "backend only (the rehearsal's image is a local venv)",
                                    "remove image.builder from this profile",
                                    field="image.builder")
        return self

    @model_validator(mode="after")
    @limits({"watch": "only with eval (the watch scores with the evaluation program)"})
    def _watch_needs_eval(self) -> Self:
        if self.watch is not None and self.eval is None:
            raise FixableValueError("a watch scores the champion with the evaluation program, "
                                    "and this profile has no eval section",
                                    "add an eval: section (docs/how-to/evaluation.md), or "
                                    "remove the watch: section", field="watch")
        return self

    @model_validator(mode="after")
    @limits({"model.maxtext_name": "with backend: local, one the rehearsal builds a tiny "
                                   f"model of ({', '.join(REHEARSAL_MODELS)})"})
    def _rehearsal_builds_the_model(self) -> Self:
        """The rehearsal converts a tiny checkpoint of the model's own structure, built only
        for the families flows/config/rehearsal_models.py lists: another name would fail
        minutes later inside MaxText's converter."""
        name = self.model.maxtext_name
        if self.backend == "local" and name not in REHEARSAL_MODELS:
            raise FixableValueError(
                f"the rehearsal cannot build a tiny model of {name!r}",
                f"set model.maxtext_name to one of {', '.join(REHEARSAL_MODELS)} (each has a "
                "profile: rehearsal, rehearsal-qwen3, rehearsal-llama, rehearsal-gemma), or "
                "train this model on GKE (backend: gke)", field="model.maxtext_name")
        return self

    @property
    def section(self) -> GkeSection | LocalSection:
        """The backend's own section: where the outputs, keys and identities that differ per
        backend come from, so nothing downstream tests which backend it is."""
        section = self.gke if self.backend == "gke" else self.local
        assert section is not None  # _backend_sections
        return section

    @property
    def total_devices(self) -> int:
        """The JAX devices train_rl splits and meshes: chips × the generation's devices per
        chip (two on tpu7x, flows/config/tpu.py), one CPU device in the rehearsal."""
        if self.gke is None:
            return 1
        return self.gke.total_chips * self.gke.machine.facts.devices_per_chip

    @property
    def num_slices(self) -> int:
        return self.gke.num_slices if self.gke else 1

    @property
    def promotion_rule(self) -> PromotionRule | None:
        """The rule a scored run is judged by: the profile's, or the documented default."""
        if self.eval is None:
            return None
        return self.promotion or PromotionRule()


def parallelism_product(values: list[int]) -> tuple[int, int]:
    """(product of fixed values, number of -1 wildcards), MaxText's convention for 'fill in'."""
    fixed = math.prod(v for v in values if v != -1)
    return fixed, sum(1 for v in values if v == -1)
