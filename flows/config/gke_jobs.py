"""The ``gke`` fields of how jobs are placed, sized, kept and watched (``GkeJobs``), and the
Kubernetes quantities they are written in."""

from __future__ import annotations

import re
from typing import Annotated, Literal, Self

from pydantic import Field, model_validator

from flows.config.errors import FixableValueError
from flows.config.gcp_names import ENV_VAR_LIMIT, env_var_problem
from flows.config.hf_scratch import scratch_problem
from flows.config.limits import limits
from flows.config.section_base import StrictModel
from flows.config.types import Checked, refusing

_QUANTITY_SUFFIX = {"": 1, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15,
                    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50}


def parse_quantity(text: str | int | float) -> float:
    """A Kubernetes quantity ("16", "500m", "100Gi", "1e3") as a number of units."""
    match = re.fullmatch(r"([0-9.]+(?:[eE][+-]?\d+)?)([a-zA-Z]*)", str(text).strip())
    if not match or match.group(2) not in _QUANTITY_SUFFIX:
        raise ValueError(f"not a Kubernetes quantity: {text!r}")
    return float(match.group(1)) * _QUANTITY_SUFFIX[match.group(2)]



DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


def _env_names(value: dict[str, str]) -> dict[str, str]:
    for name in value:
        if problem := env_var_problem(name):
            raise FixableValueError(problem, "name an environment variable, e.g. "
                                    "SKIP_JAX_PRECOMPILE: \"0\"")
    return value


def _quantity_problem(value: str) -> str | None:
    try:
        parse_quantity(value)
    except ValueError:
        return f"{value!r} is not a Kubernetes quantity"
    return None


def _digest(value: str) -> str:
    if not DIGEST.fullmatch(value.strip()):
        raise FixableValueError(f"{value!r} is not an image digest",
                                "write sha256: and the 64 hex digits `gcloud artifacts "
                                "docker images describe` prints")
    return value.strip()


Quantity = Annotated[str, Checked(refusing(_quantity_problem, "write it like 30, 500m, 192Gi"),
                                  "a Kubernetes quantity such as 30, 500m, 192Gi")]
ImageDigest = Annotated[str, Checked(_digest, "sha256: and 64 hex digits")]
PinnedTag = Annotated[str, Checked(refusing(
    lambda v: "the Pathways images must be pinned, not :latest" if v in ("", "latest") else None,
    "set a tag that matches the image's JAX, e.g. jax-0.11.0"), "a tag, not latest")]


class GkeJobs(StrictModel):
    """How the GKE backend places, sizes, keeps and watches the jobs (tutorial values)."""

    # cpu-pool: one pod on the CPU pool, no TPU held. tpu-hosts: the tutorial's placement
    # (every host of the slice, only JOB_COMPLETION_INDEX 0 works, 32 chips held for a CPU job).
    conversion_placement: Literal["cpu-pool", "tpu-hosts"] = "cpu-pool"
    """Where the conversions run: the CPU pool (default) or the TPU hosts."""
    # Pathways server and proxy must match the JAX of the workload image; upstream defaults to
    # :latest, which silently changes under a running project. MaxText 0.2.4 pins jax 0.11.0.
    pathways_tag: PinnedTag = "jax-0.11.0"
    """The tag of the Pathways server and proxy images."""
    # Their digests (``sha256:<64 hex>``): a tag can be moved by whoever owns the
    # repository, a digest cannot. Set, the images are pulled as TAG@DIGEST; unset, plan
    # and validate warn. Not shipped: they could not be resolved where this was written;
    # `gcloud artifacts docker images describe IMAGE:TAG` prints them.
    pathways_server_digest: ImageDigest | None = None
    """Pull the Pathways server image by this digest (sha256:...)."""
    pathways_proxy_digest: ImageDigest | None = None
    """Pull the Pathways proxy image by this digest (sha256:...)."""
    # Sized to fit one node of the cpu-np pool the toolkit creates (n4-standard-64: ~244Gi
    # allocatable memory; default 100 GB boot disk: ~45Gi allocatable ephemeral storage, too
    # little for the ~61 GB of HF safetensors to_maxtext downloads). So the HF cache and
    # TMPDIR live on a memory-backed scratch volume (counted in the memory limit). Measured
    # (tiny model, MaxText 0.2.4): to_maxtext --lazy_load_tensors peaks at 1.6x the
    # checkpoint above the import baseline → ~98 GB for 61 GB, + 61 GB cache ≈ 150 GiB;
    # to_huggingface uploads safetensors from memory (no disk), ≤ 2x the checkpoint ≈ 117 GiB.
    # Guaranteed QoS (request = limit) so the kubelet does not evict the pod first.
    conversion_cpu: Quantity = "30"
    """CPU request of the conversion pod."""
    conversion_memory: Quantity = "192Gi"
    """Memory request of the conversion pod."""
    conversion_scratch_memory: Quantity = "64Gi"
    """Size of the conversion's in-memory scratch volume."""
    # The HF checkpoint's safetensors, what the scratch must hold (flows/config/hf_scratch.py):
    # Qwen3-30B-A3B, 30.5B parameters x 2 bytes (bf16) = 61 GB, about 57 GiB.
    hf_download_gib: float = Field(57.0, gt=0)
    """GiB the base model's download takes (sizes the conversion's scratch)."""
    conversion_ephemeral_storage: Quantity = "16Gi"
    """Ephemeral storage request of the conversion pod."""
    job_ttl_s: int = Field(3600, ge=0)  # gcluster's default for plain jobs
    """Seconds a finished JobSet is kept before Kubernetes deletes it."""
    train_ttl_s: int = Field(86400, ge=0)  # gcluster's default for Pathways jobs
    """Seconds a finished training JobSet is kept."""
    job_max_restarts: int = Field(1, ge=0)  # gcluster --restarts default
    """JobSet restarts of a conversion before it fails."""
    train_max_restarts: int = Field(0, ge=0)  # the tutorial: the flow resubmits and resumes
    """JobSet restarts of training (0: the flow resubmits and resumes instead)."""
    # Watch budgets (flows/backends/gke/watch/monitor.py); None: the monitor's defaults.
    queue_budget_s: float | None = Field(None, gt=0)
    """Seconds a JobSet may wait in Kueue's queue before the stage fails (queue-timeout)."""
    run_budget_s: float | None = Field(None, gt=0)
    """Seconds one JobSet attempt may run."""
    train_run_budget_s: float | None = Field(None, gt=0)
    """Seconds one training attempt may run (else run_budget_s)."""
    preemption_budget: int | None = Field(None, ge=0)
    """How many preemptions a stage resubmits before it fails."""
    # Environment of training (and evaluation, which runs like it) on the slice, over what
    # MaxText's own RL launch scripts set (flows/backends/gke/runtime.py MAXTEXT_RL_ENV, e.g.
    # SKIP_JAX_PRECOMPILE=1); a name given here replaces that default. Plain values only: a
    # secret goes through model.hf_token's kinds of reference, never here.
    train_env: Annotated[dict[str, str], Checked(_env_names, f"keys: {ENV_VAR_LIMIT}")] = Field(
        default_factory=dict)
    """Environment of training and evaluation over what MaxText's RL scripts set
    (SKIP_JAX_PRECOMPILE=1)."""



    @model_validator(mode="after")
    @limits({"conversion_scratch_memory": [
        "below gke.conversion_memory",
        "with cpu-pool placement: room for the download of gke.hf_download_gib"]})
    def _scratch_in_memory(self) -> Self:
        if parse_quantity(self.conversion_scratch_memory) >= parse_quantity(self.conversion_memory):
            raise FixableValueError(
                f"conversion_scratch_memory {self.conversion_scratch_memory} must be below "
                f"conversion_memory {self.conversion_memory}: the scratch volume is "
                "memory-backed and counts against the pod's memory limit",
                "raise gke.conversion_memory or lower gke.conversion_scratch_memory",
                field="conversion_scratch_memory")
        if self.conversion_placement == "cpu-pool" and (problem := scratch_problem(
                self.hf_download_gib, parse_quantity(self.conversion_scratch_memory))):
            raise FixableValueError(*problem, field="conversion_scratch_memory")
        return self


