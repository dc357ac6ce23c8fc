"""How the MaxText programs run in the rehearsal: the pinned venv plays the image, a tiny
model of ``model.maxtext_name``'s structure built by the infra step plays the hub model, and a
launcher stands in for vLLM.

The launcher (images/rehearsal/train_rl_cpu.py) replaces only the rollout engine with a CPU
sampler over the actor; everything else is MaxText's and Tunix's real train_rl.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from flows.common.paths import REHEARSAL_DIR, REPO_ROOT
from flows.config.data_rules import announced_data_args
from flows.config.profile import Profile
from flows.config.rehearsal_models import rehearsal_model
from flows.core.backend import Env, ModelSource, ProgramSetup
from flows.core.failures import user_error
from flows.core.layout import Layout
from flows.core.storage import Storage, program_path
from flows.core.workload import Placement, Workload

REHEARSAL_IMAGE = "rehearsal-venv"
HF_CHECK_IMAGE = "hf-check-venv"
HF_CHECK_NAME = "verify-hf-export-loads"
STAND_IN_NOTE = ("rehearsal: the vLLM rollout is replaced by a CPU stand-in that samples from the "
                 "actor itself (images/rehearsal/train_rl_cpu.py); everything else is MaxText's "
                 "and Tunix's real code")
LOCAL_ENV: Env = (("JAX_PLATFORMS", "cpu"), ("HF_HUB_OFFLINE", "1"), ("HF_DATASETS_OFFLINE", "1"),
                  ("TOKENIZERS_PARALLELISM", "false"))
# Python's bytecode of the venvs, beside them: a venv installed by uv holds no .pyc, and with
# PYTHONDONTWRITEBYTECODE set (as on this machine) every program recompiled tensorflow, jax,
# transformers and MaxText from source at each start (to_huggingface's imports: 68 s against
# 22 s with the bytecode kept, at load ~2). A prefix rather than __pycache__ inside the venvs
# leaves their files as installed; Python checks each source's mtime, so a patched file is
# recompiled. Deleting .venvs clears it with the venvs, like the JAX cache below.
BYTECODE_DIR = "python-bytecode-cache"
# JAX's persistent compilation cache, beside the venvs: XLA keys each entry by the program,
# the jax/jaxlib versions and the flags, so every run and output root may share it, and a
# rerun (a changed reward, learning rate or seed) skips the minutes XLA spends compiling the
# same MaxText programs on CPU. Deleting .venvs clears it with the venvs.
JAX_CACHE_DIR = "jax-compilation-cache"
# The load check's torch on one thread: a tiny model's load, a few greedy tokens and a
# tensor-by-tensor comparison gain nothing from more, and torch's OpenMP threads spin
# between its many small operations. Measured on 2 busy cores: 10.9 CPU-s with torch's
# default against 8.0 with one thread, and no slower (19 s wall against 22-27). The
# comparison is of the files' bytes, which no thread count changes.
CHECK_THREADS: Env = (("OMP_NUM_THREADS", "1"),)


def rehearsal_script(name: str) -> str:
    return str((REHEARSAL_DIR / name).relative_to(REPO_ROOT))


def bytecode_env(venvs: Path) -> Env:
    """Keep the programs' bytecode under ``venvs`` (BYTECODE_DIR), whatever the caller's
    PYTHONDONTWRITEBYTECODE (an empty value turns it off)."""
    return (("PYTHONDONTWRITEBYTECODE", ""), ("PYTHONPYCACHEPREFIX", str(venvs / BYTECODE_DIR)))


class LocalRuntime:
    def __init__(self, profile: Profile, layout: Layout) -> None:
        self.profile, self.layout = profile, layout

    def image(self, built: str | None) -> str:
        return REHEARSAL_IMAGE

    def model(self) -> ModelSource:
        return ModelSource(path=program_path(self.layout.tiny_model_dir),
                           uri=self.layout.tiny_model_dir)

    def dataset_uri(self) -> str | None:
        return self.profile.data.train_files or self.layout.dataset_file

    def eval_entry(self, scores_path: str, eval_args: list[str]) -> list[str]:
        """The evaluation program (flows/core/eval_programs.py) with the CPU rollout stand-in,
        restoring its checkpoint once: the actor is a copy of the reference model, the same
        weights, and the second restore was ~1-2 of the program's ~23 CPU-s
        (docs/decisions/0046-the-rehearsal-loads-its-checkpoints-once.md)."""
        return ["python3", rehearsal_script("evaluate_rl.py"), "--cpu-rollout",
                "--restore-once", "--out", scores_path, *eval_args, "--"]

    def setup(self, program: str) -> ProgramSetup:
        """Every program shares the CPU environment, JAX's compilation cache and the venvs'
        bytecode; training runs the stand-in launcher; the export runs MaxText's converter
        through to_huggingface_gc.py (its imports frozen for the collector, TensorFlow left
        out, its slices numpy's: decision 0047) and is followed by the transformers load
        check."""
        venvs = self.layout.venv_dir().parent
        cache = venvs / JAX_CACHE_DIR
        # Every compilation kept, not only those over JAX's 1 s default: on CPU most of the
        # programs' compilations are tiny (train's and evaluate's sampling and metric helpers,
        # the export's few), and a one-field change reruns them all.
        env = (*LOCAL_ENV, ("JAX_COMPILATION_CACHE_DIR", str(cache)),
               ("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0"), *bytecode_env(venvs))
        if program == "train":
            dataset = self.dataset_uri()
            assert dataset is not None
            return ProgramSetup(
                launcher=("python3", rehearsal_script("train_rl_cpu.py")),
                args=(f"hf_train_files={program_path(dataset)}",
                      f"tokenizer_path={program_path(self.layout.tiny_model_dir)}",
                      *announced_data_args(self.profile)),
                env=env, notes=(STAND_IN_NOTE,))
        if program == "evaluate":  # its rollouts use the same stand-in as training's
            return ProgramSetup(env=env, notes=(STAND_IN_NOTE,))
        if program == "export":
            argv = ("python3", rehearsal_script("check_hf_export.py"),
                    "--export", program_path(self.layout.export_dir),
                    "--original", program_path(self.layout.tiny_model_dir),
                    "--expect-class", self.expected_class())
            check = Workload(name=HF_CHECK_NAME, image=HF_CHECK_IMAGE, argv=argv,
                             placement=Placement(kind="cpu"),
                             env=(*LOCAL_ENV, *bytecode_env(venvs), *CHECK_THREADS))
            # The converter compiles ~650 tiny XLA programs (one slice per layer and expert
            # index, ~60 ms each): below JAX's 1 s threshold none was kept (env above), and
            # MaxText's jax_cache_dir (default ~/jax_cache) overrode the shared cache. Kept, a
            # rerun loads them instead; the converted weights are the same bytes.
            return ProgramSetup(
                launcher=("python3", rehearsal_script("to_huggingface_gc.py")),
                args=(f"jax_cache_dir={cache}",), env=env, checks=(check,))
        return ProgramSetup(env=env)

    def expected_class(self) -> str:
        """The transformers class the export of this profile's model must load as."""
        return rehearsal_model(self.profile.model.maxtext_name).hf_class

    def accept(self, program: str, storage: Storage) -> dict[str, Any]:
        """The export's load check printed one JSON report: right class, and weights that
        moved."""
        if program != "export":
            return {}
        log = storage.read_text(self.layout.log(self.layout.export_dir, HF_CHECK_NAME)) or ""
        reports = [line for line in log.splitlines() if line.startswith("{")]
        if not reports:
            raise user_error("export", "the load check printed no report", log[-2000:],
                           "run images/rehearsal/check_hf_export.py by hand")
        report = json.loads(reports[-1])
        if report.get("architecture") != self.expected_class():
            raise user_error("export", "transformers loaded the export as the wrong class",
                           json.dumps(report), "check the export's config.json")
        if not report.get("tensors_changed"):
            raise user_error("export", "the exported weights equal the base model's: training changed "
                           "nothing", json.dumps(report),
                           "check that rewards vary (GRPO advantages are zero otherwise)")
        return {"load_check": report}

