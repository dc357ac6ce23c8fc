"""How the MaxText programs run on GKE: the patched image by digest, the model from the hub,
and training as a Pathways job (CPU head + TPU workers) with the tutorial's preamble."""

from __future__ import annotations

import shlex
from typing import Any

from flows.backends.gke.jobs.program_files import PROGRAMS_DIR, program_path
from flows.config.data_rules import announced_data_args
from flows.config.gke import GkeSection
from flows.config.gke_jobs import parse_quantity
from flows.config.gke_section import gke_section
from flows.config.hf_scratch import plan_note
from flows.config.profile import Profile
from flows.core.backend import Env, ModelSource, ProgramSetup
from flows.core.eval_programs import eval_program_file
from flows.core.layout import patched_image_ref
from flows.core.recipe_files import recipe_destinations
from flows.core.storage import Storage
from flows.core.workload import Placement

# The tutorial's training container raises its memory cgroup to 190G (the head pod's limit
# is too small for the checkpoint restore), which needs a privileged container; ours asks
# for 190G as its limit instead (jobs/pathways.py PROGRAM_MEMORY) and stays unprivileged.
# vLLM gets the pod's address, as the tutorial does.
TRAIN_PREAMBLE = (
    "export VLLM_HOST_IP=$(hostname -I | awk '{print $1}')",
    "export VLLM_ENABLE_V1_MULTIPROCESSING=0",
)
PATHWAYS_ENV: Env = (("JAX_PLATFORMS", "proxy,cpu"), ("ENABLE_PATHWAYS_PERSISTENCE", "1"))
# MaxText 0.2.4 hands tokenizer_path (training) and --hf_model_path (to_huggingface,
# maxtext/checkpoint_conversion/to_huggingface.py: `AutoTokenizer.from_pretrained(
# FLAGS.hf_model_path or HF_IDS[...])`) to transformers without a revision, so a hub id
# there reads the repository's default branch, whatever model.hf_revision pins.
# The tokenizer's files are fetched at the pinned revision first (HF_TOKEN from the
# container's environment) and read from this folder.
TOKENIZER_DIR = "/tmp/tpurl-tokenizer"
TOKENIZER_FILES = ("*.json", "*.txt", "*.model", "*.tiktoken")  # no weights


def tokenizer_preamble(repo: str, revision: str) -> str:
    """The shell line that downloads the tokenizer of ``repo`` at ``revision`` (quoted once)."""
    code = ("import sys; from huggingface_hub import snapshot_download; "
            "snapshot_download(sys.argv[1], revision=sys.argv[2], local_dir=sys.argv[3], "
            f"allow_patterns={list(TOKENIZER_FILES)!r})")
    return (shlex.join(["python3", "-c", code, repo, revision, TOKENIZER_DIR])
            + " || { echo 'tpurl: cannot download the tokenizer at model.hf_revision' >&2; "
            "exit 1; }")


# What MaxText 0.2.4's own RL launch scripts set for train_rl on Pathways, unless the profile
# says otherwise (gke.train_env): SKIP_JAX_PRECOMPILE=1 (maxtext-v0.2.4
# src/maxtext/trainers/post_train/rl/scripts/run_qwen3_30b_rl.sh:85,
# run_gptoss_20b_rl.sh:86, tests/end_to_end/tpu/qwen3/30b/test_qwen3_rl.sh:23), without
# which tpu-inference precompiles every shape bucket when the vLLM engine starts, minutes of
# billed slice time before the first step. (VLLM_ENABLE_V1_MULTIPROCESSING=0, which the
# scripts set too, is in TRAIN_PREAMBLE; JAX_PLATFORMS and ENABLE_PATHWAYS_PERSISTENCE in
# PATHWAYS_ENV.)
MAXTEXT_RL_ENV: Env = (("SKIP_JAX_PRECOMPILE", "1"),)


def train_env(gke: GkeSection) -> Env:
    """Pathways' and MaxText's RL environment, with the profile's gke.train_env over it."""
    given = gke.train_env
    defaults = tuple((k, v) for k, v in (*PATHWAYS_ENV, *MAXTEXT_RL_ENV) if k not in given)
    return (*defaults, *given.items())


class GkeRuntime:
    def __init__(self, profile: Profile) -> None:
        self.profile, self.gke = profile, gke_section(profile)

    def image(self, built: str | None) -> str:
        """The image stage's pushed digest; before it ran (plans), the content tag."""
        return built or patched_image_ref(self.profile)

    def model(self) -> ModelSource:
        model = self.profile.model
        return ModelSource(path=model.hf_repo, uri=f"hf://{model.hf_repo}@{model.hf_revision}")

    def dataset_uri(self) -> str | None:
        return self.profile.data.train_files

    def eval_entry(self, scores_path: str, eval_args: list[str]) -> list[str]:
        """The evaluation program as the pod finds it (shipped beside the image, see
        flows/backends/gke/jobs/program_files.py); it writes the scores to the bucket."""
        return ["python3", program_path(eval_program_file().name), "--out", scores_path,
                *eval_args, "--"]

    def setup(self, program: str) -> ProgramSetup:
        """Convert downloads the pinned revision on the CPU pool; training is a Pathways job
        (CPU head + TPU workers) with the tutorial's preamble; evaluation runs in the same
        place as training (its rollouts are training's vLLM engine), with its program shipped
        beside the image; training and export read the tokenizer downloaded at the pinned
        revision."""
        gke = self.gke
        if program == "convert":
            notes = ((plan_note(gke.hf_download_gib, parse_quantity(gke.conversion_scratch_memory)),)
                     if gke.conversion_placement == "cpu-pool" else ())
            return ProgramSetup(args=(f"--revision={self.profile.model.hf_revision}",),
                                notes=notes)
        if program == "train":
            model = self.profile.model
            args = [f"tokenizer_path={TOKENIZER_DIR}"]
            if self.profile.data.train_files:
                args.append(f"hf_train_files={self.profile.data.train_files}")
            return ProgramSetup(
                args=(*args, *announced_data_args(self.profile)),
                placement=Placement(kind="pathways", topology=gke.topology,
                                    machine_type=gke.machine_type, num_slices=gke.num_slices,
                                    chips=gke.total_chips),
                env=train_env(self.gke), shipped_dir=PROGRAMS_DIR,
                preamble=(*TRAIN_PREAMBLE, tokenizer_preamble(model.hf_repo, model.hf_revision)),
                notes=self._recipe_notes("training"))
        if program == "evaluate":  # placement, env and preamble: the train workload's
            return ProgramSetup(files=(eval_program_file(),), shipped_dir=PROGRAMS_DIR, notes=(
                "the evaluation program (images/rehearsal/evaluate_rl.py) is shipped beside "
                "the post-training image as an immutable ConfigMap mounted at /tpurl/programs, "
                "so changing it reruns only this stage", *self._recipe_notes("evaluation")))
        if program == "export":  # to_huggingface reads only the tokenizer there (0.2.4)
            model = self.profile.model
            return ProgramSetup(tokenizer=TOKENIZER_DIR,
                                preamble=(tokenizer_preamble(model.hf_repo, model.hf_revision),))
        return ProgramSetup()

    def _recipe_notes(self, workload: str) -> tuple[str, ...]:
        """Where the recipe's files go: the plan says it, so a team sees its own file named
        before a slice is held."""
        where = recipe_destinations(self.profile, PROGRAMS_DIR)
        if not where:
            return ()
        return (f"the recipe ships with the {workload} in its immutable ConfigMap, mounted "
                f"read-only at {PROGRAMS_DIR}: {'; '.join(where)}; a changed file changes the "
                "training's key",)

    def accept(self, program: str, storage: Storage) -> dict[str, Any]:
        return {}  # no checks of its own
