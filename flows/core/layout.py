"""Where every output lives, and the keys that name it: pure functions of the profile.

Output directories carry a short hash of everything that shapes their content (the *key*), so
a changed learning rate writes a new training run instead of resuming an unrelated one, and a
plan can print every URI before anything runs. Keys chain: train's key includes convert's,
export's includes train's, so a change upstream re-runs exactly what depends on it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from flows.common.paths import PATCHES_FILE, repo_relative
from flows.config.gke_section import gke_section
from flows.config.profile import Profile
from flows.config.rehearsal_models import rehearsal_model
from flows.core.continuation import family_args, run_args
from flows.core.lineage import RECORD_NAME, config_key
from flows.core.patching import declarations_digest, enabled, load_declarations
from flows.core.recipe_files import recipe_key_parts
from flows.core.storage import join


def runtime_identity(profile: Profile) -> str:
    """What decides the MaxText code that runs (the backend's section says what that is)."""
    return profile.section.runtime_identity(profile.image.base)


def image_key(profile: Profile) -> str:
    patches = enabled(load_declarations(PATCHES_FILE), profile.image.disabled_patches)
    return config_key("image", runtime_identity(profile), declarations_digest(patches),
                      *profile.section.image_key_parts())


def patched_image_ref(profile: Profile) -> str:
    """Where the patched image is pushed; tagged by content (image key), used by digest."""
    if profile.image.repository:
        repository = profile.image.repository
    else:
        gke = gke_section(profile)
        repository = (f"{gke.region}-docker.pkg.dev/{gke.project}/tpurl/"
                      "tpu-post-training")
    return f"{repository}:{image_key(profile)}"


def infra_key(profile: Profile) -> str:
    return config_key(*profile.section.infra_key_parts(profile.model.maxtext_name))


def model_source_key(profile: Profile) -> str:
    model = profile.model
    return config_key(model.maxtext_name, model.hf_repo, model.hf_revision, model.args,
                      profile.section.model_seed())


def convert_key(profile: Profile) -> str:
    return config_key("convert", model_source_key(profile), profile.convert.args,
                      runtime_identity(profile))


def dataset_key(profile: Profile) -> str:
    if profile.data.train_files:
        if profile.data.dataset_name:  # how the files are read is part of what trains
            return config_key("data-files", profile.data.train_files, profile.data.dataset_name)
        return config_key("data-files", profile.data.train_files)
    parts = profile.section.dataset_key_parts()
    return config_key(*parts) if parts else "hub"


def train_key(profile: Profile) -> str:
    """What the trained model is: every train argument, its length too."""
    return config_key("train", convert_key(profile), profile.train.args, image_key(profile),
                      dataset_key(profile), *recipe_key_parts(profile))


def run_key(profile: Profile) -> str:
    """What the training run's steps are, without how many it takes (continuation.py): a
    run that differs from an earlier one only in length continues it in the same run
    directory."""
    return config_key("train-run", convert_key(profile), run_args(profile.train.args),
                      image_key(profile), dataset_key(profile), *recipe_key_parts(profile))


def family_key(profile: Profile) -> str:
    """What runs differing only in length and learning-rate schedule share: how a run
    whose schedule follows its own length finds the earlier run it could continue."""
    return config_key("train-family", convert_key(profile), family_args(profile.train.args),
                      image_key(profile), dataset_key(profile), *recipe_key_parts(profile))


def export_key(profile: Profile) -> str:
    return config_key("export", train_key(profile), profile.export.args,
                      runtime_identity(profile))


# under a profile's output root: its results (`<run>.json`, `latest.json`) and its promotion
# pointer (`promoted.json`, `promoted-history.json`), in a folder of the profile's name
RESULTS_DIR = "tpurl-results"
# in a training run's directory: its family, length and schedule (Layout.run_card)
RUN_CARD_NAME = "tpurl-run.json"


@dataclass(frozen=True)
class Layout:
    """All URIs of one profile's run."""

    profile: Profile

    @property
    def root(self) -> str:
        return self.profile.section.output_root()

    @property
    def model_root(self) -> str:
        return join(self.root, self.profile.model.maxtext_name)

    # image (local: the rehearsal venv plays the image)
    def venv_dir(self) -> Path:
        assert self.profile.local is not None
        return repo_relative(self.profile.local.venv)

    def hf_check_venv_dir(self) -> Path:
        assert self.profile.local is not None
        return repo_relative(self.profile.local.hf_check_venv)

    # infra
    @property
    def sources_dir(self) -> str:
        return join(self.root, "sources", infra_key(self.profile))

    @property
    def tiny_model_dir(self) -> str:
        return join(self.sources_dir, rehearsal_model(self.profile.model.maxtext_name).directory)

    @property
    def dataset_file(self) -> str:
        return join(self.sources_dir, "openmathinstruct2-shaped.parquet")

    # convert
    @property
    def convert_dir(self) -> str:
        return join(self.model_root, "max-text-format", convert_key(self.profile))

    @property
    def converted_checkpoint(self) -> str:
        return join(self.convert_dir, "0", "items")

    # train
    @property
    def train_base(self) -> str:
        return join(self.model_root, "trained")

    @property
    def run_name(self) -> str:
        return f"rl-{run_key(self.profile)}"

    @property
    def train_run_dir(self) -> str:
        return join(self.train_base, self.run_name)

    @property
    def actor_checkpoints(self) -> str:
        return join(self.train_run_dir, "checkpoints", "actor")

    @property
    def run_card(self) -> str:
        """What the run trains, written before it starts: how a later run of the same
        training with another schedule finds it (flows/stages/train.py)."""
        return join(self.train_run_dir, RUN_CARD_NAME)

    def actor_params(self, step: int) -> str:
        return join(self.actor_checkpoints, str(step), "model_params")

    # export
    @property
    def export_dir(self) -> str:
        return join(self.model_root, "hf-trained", export_key(self.profile))

    def record(self, stage_dir: str) -> str:
        return join(stage_dir, RECORD_NAME)

    def log(self, stage_dir: str, workload: str) -> str:
        return join(stage_dir, "tpurl-logs", f"{workload}.log")

