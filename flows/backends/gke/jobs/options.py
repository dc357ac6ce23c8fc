"""Rendering knobs that are not (yet) fields of the profile, with the tutorial's values.

``options_for`` reads a field of the same name from ``profile.gke`` when the profile defines
it, so adding e.g. ``conversion_placement`` to GkeSection makes it configurable with no change
here. Defaults are the tutorial's (TTL, restarts, pool names) except where noted.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Literal

from flows.config.profile import Profile

ConversionPlacement = Literal["cpu-pool", "tpu-hosts"]
PATHWAYS_REPOSITORY = "us-docker.pkg.dev/cloud-tpu-v2-images/pathways"
# Pathways server and proxy must match the JAX of the workload image; upstream defaults to
# :latest, which silently changes under a running project. MaxText 0.2.4 pins jax 0.11.0.
PATHWAYS_TAG = "jax-0.11.0"


@dataclass(frozen=True)
class GkeOptions:
    namespace: str = "default"
    cpu_pool: str = "cpu-np"  # the blueprint's CPU node pool (n4-standard-64, 0–100 nodes)
    # cpu-pool: one pod on cpu-np, no TPU held. tpu-hosts: the tutorial's placement (every
    # host of the slice, only JOB_COMPLETION_INDEX 0 works, 32 chips held for a CPU job).
    conversion_placement: ConversionPlacement = "cpu-pool"
    # A 30B checkpoint: ~62 GB of HF safetensors downloaded plus the converted copy staged
    # before upload, and both held in host memory at the peak of to_huggingface. Guaranteed
    # QoS (request = limit) so the kubelet does not evict the pod first under pressure.
    conversion_cpu: str = "30"
    conversion_memory: str = "200Gi"
    conversion_ephemeral_storage: str = "200Gi"
    scratch_dir: str = "/scratch"
    job_ttl_s: int = 3600  # gcluster's default for plain jobs
    train_ttl_s: int = 86400  # gcluster's default for Pathways jobs
    job_max_restarts: int = 1  # gcluster --restarts default
    train_max_restarts: int = 0  # the tutorial: the flow resubmits and resumes instead
    termination_grace_s: int = 30
    worker_backoff_limit: int = 32
    pathways_repository: str = PATHWAYS_REPOSITORY
    pathways_tag: str = PATHWAYS_TAG
    hf_token_key: str = "value"  # key inside the Secret

    @property
    def proxy_image(self) -> str:
        return f"{self.pathways_repository}/proxy_server:{self.pathways_tag}"

    @property
    def server_image(self) -> str:
        return f"{self.pathways_repository}/server:{self.pathways_tag}"


def options_for(profile: Profile) -> GkeOptions:
    """Defaults, overridden by any same-named field the profile's gke section defines."""
    options = GkeOptions()
    if profile.gke is None:
        return options
    found = {f.name: getattr(profile.gke, f.name) for f in fields(GkeOptions)
             if hasattr(profile.gke, f.name)}
    return replace(options, **found)
