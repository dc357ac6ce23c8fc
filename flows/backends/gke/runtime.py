"""How the MaxText programs run on GKE: the patched image by digest, the model from the hub,
and training as a Pathways job (CPU head + TPU workers) with the tutorial's preamble."""

from __future__ import annotations

from typing import Any

from flows.config.data_rules import announced_data_args
from flows.config.gke import parse_quantity
from flows.config.hf_scratch import plan_note
from flows.config.profile import Profile
from flows.core.backend import Env
from flows.core.layout import patched_image_ref
from flows.core.storage import Storage
from flows.core.workload import Placement, Workload

TRAIN_RL = "maxtext.trainers.post_train.rl.train_rl"
# The training container raises its memory cgroup (the head pod's default is too small for
# the checkpoint restore) and gives vLLM its host address, as the tutorial does.
TRAIN_PREAMBLE = (
    "(echo 190G > /sys/fs/cgroup/memory.max || "
    "echo 190G > /sys/fs/cgroup/memory/memory.limit_in_bytes) 2>/dev/null || true",
    "export VLLM_HOST_IP=$(hostname -I | awk '{print $1}')",
    "export VLLM_ENABLE_V1_MULTIPROCESSING=0",
)
PATHWAYS_ENV: Env = (("JAX_PLATFORMS", "proxy,cpu"), ("ENABLE_PATHWAYS_PERSISTENCE", "1"))


class GkeRuntime:
    def __init__(self, profile: Profile) -> None:
        assert profile.gke is not None
        self.profile, self.gke = profile, profile.gke

    def image(self, built: str | None) -> str:
        """The image stage's pushed digest; before it ran (plans), the content tag."""
        return built or patched_image_ref(self.profile)

    def model_source(self) -> str:
        return self.profile.model.hf_repo

    def model_source_uri(self) -> str:
        model = self.profile.model
        return f"hf://{model.hf_repo}@{model.hf_revision}"

    def convert_extra_args(self) -> list[str]:
        return [f"--revision={self.profile.model.hf_revision}"]

    def dataset_uri(self) -> str | None:
        return self.profile.data.train_files

    def train_entry(self) -> list[str]:
        return ["python3", "-m", TRAIN_RL]

    def train_data_args(self) -> list[str]:
        args = [f"tokenizer_path={self.profile.model.hf_repo}"]
        if self.profile.data.train_files:
            args.append(f"hf_train_files={self.profile.data.train_files}")
        return [*args, *announced_data_args(self.profile)]

    def train_placement(self) -> Placement:
        gke = self.gke
        return Placement(kind="pathways", topology=gke.topology, machine_type=gke.machine_type,
                         num_slices=gke.num_slices, chips=gke.total_chips)

    def train_env(self) -> Env:
        return PATHWAYS_ENV

    def train_preamble(self) -> tuple[str, ...]:
        return TRAIN_PREAMBLE

    def program_env(self) -> Env:
        return ()

    def notes(self, stage: str) -> list[str]:
        gke = self.gke
        if stage == "convert" and gke.conversion_placement == "cpu-pool":
            return [plan_note(gke.hf_download_gib, parse_quantity(gke.conversion_scratch_memory))]
        return []

    def export_checks(self) -> list[Workload]:
        return []

    def accept_export(self, storage: Storage) -> dict[str, Any]:
        return {}
