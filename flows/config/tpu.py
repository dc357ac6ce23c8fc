"""Facts about TPU generations, their machine types and slice topologies: what a profile may
name, what GKE labels the nodes, what Pathways is told, what a chip holds and computes.

Kept as a table (not code paths) so that adding a generation is a data change: the JobSets'
node selector, Pathways' ``--instance_type``, the Kueue flavor's node labels, the quota the
pre-flight looks for and the fit estimate's HBM all read a row of ``TPU_GENERATIONS``. A
profile naming a machine type not listed here is refused rather than rendered with guessed
labels. Each fact names where it was read.

Listed: v6e (Trillium, the tutorial's), v5p and tpu7x (Ironwood): MaxText 0.2.4 ships a
GRPO launch on Pathways for each (trainers/post_train/rl/scripts/run_gemma4_e4b_rl.sh v6e-32,
run_gptoss_20b_rl.sh v5p-64, run_qwen3_30b_rl.sh tpu7x-128, all ``xpk workload
create-pathways``). Not listed: v5e. XPK knows its Pathways version (``tpuv5e``), but no RL
script or config of the pinned MaxText names it, and its 16 GB per chip is half of v6e's.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class TpuGeneration:
    """One TPU generation's facts, shared by its machine types."""

    name: str  # the key: v6e, v5p, tpu7x
    accelerator_label: str  # value of cloud.google.com/gke-tpu-accelerator
    pathways_instance_prefix: str  # "tpuv6e" → --instance_type=tpuv6e:4x8
    hbm_bytes_per_chip: int  # decimal bytes, the smaller reading of Google's "GB"
    peak_bf16_tflops: float  # per chip, Google's architecture page
    quota_family: str  # the part of Compute Engine's TPU quota metric that names it
    blueprint_example: str  # Cluster Toolkit's example this generation's node pool copies
    flavor_prefix: str  # Kueue's TPU ResourceFlavor: <prefix>-flavor, <prefix>-<mode>-flavor
    pool_prefix: str  # the TPU node pools' GKE names: <prefix>-pool, <prefix>-<mode>-<zone>
    devices_per_chip: int = 1  # JAX devices a chip shows: what train_rl splits and shards

    @property
    def hbm_bytes_per_device(self) -> int:
        return self.hbm_bytes_per_chip // self.devices_per_chip


# Sources, read 2026-12-06:
# - labels, machine types and Pathways versions: AI-Hypercomputer/xpk
#   src/xpk/core/system_characteristics.py (367c838) gke_accelerator / machine_type /
#   pathways_tpu_version: tpu-v6e-slice ct6e-standard-{1,4}t tpuv6e; tpu-v5p-slice
#   ct5p-hightpu-4t tpuv5; tpu7x tpu7x-standard-4t tpu7x. XPK writes them into the
#   pathways-head's --instance_type={pathways_tpu_version}:{topology}
#   (src/xpk/templates/pathways_workload_create.yaml.j2).
# - HBM and peak bf16: https://cloud.google.com/tpu/docs/tpu7x "System architecture" table
#   (v5p 459 TFLOPs 95 GiB, v6e 918 TFLOPs 32 GiB, TPU7x 2307 TFLOPs 192 GiB); the v5p and
#   v6e pages say GB, so the estimate keeps the smaller decimal reading for all three.
# - quota metric family: the generation's part of its Compute Engine TPU quota's name, as
#   Cloud Quotas' ids carry it (PREEMPTIBLE-TPU-V6E-, TPU-V5P-, PREEMPTIBLE-TPU7X-per-project-
#   region: reported by projects, not on a Google page read here; the ids per mode, their
#   sources and what is unknown: flows/backends/gke/infra/preflight/quota_names.py). A
#   listing without a matching metric leaves the quota check "unknown", never "ok".
# - blueprint examples: GoogleCloudPlatform/cluster-toolkit (1047080) examples/gke-tpu-v6e/
#   gke-tpu-v6e-advanced.yaml and examples/gke-tpu-7x/gke-tpu-7x-advanced.yaml (its pool uses
#   a HIGH_THROUGHPUT workload_policy of accelerator_topology instead of tpu_topology, as GKE's
#   Ironwood page says: "This policy replaces the --tpu-topology flag"); no v5p example ships.
# - Kueue flavor names: each example's kueue-configuration.yaml.tftpl names its TPU
#   ResourceFlavor tpuv6e-flavor and tpu7x-flavor; v5p's, with no example, follows v6e's form.
# - JAX devices per chip: MaxText 0.2.4's own RL scripts. run_qwen3_30b_rl.sh on tpu7x-128
#   (64 chips, 4 per tpu7x-standard-4t VM) sets chips_per_vm=8 and rollout data 16 × tensor 4
#   = 64 sampler devices, half of 128: two devices a chip. run_gptoss_20b_rl.sh on v5p-64
#   (32 chips, megacore) sets chips_per_vm=4 and data 2 × tensor 8 = 16, half of 32: one.
# - pool names: each example's TPU pool is <prefix>-pool, gke-tpu-v6e-pool and gke-tpu-7x-pool;
#   v5p's follows v6e's form. v6e's is also the name every v6e cluster deployed so far has:
#   a renamed pool is a new Terraform resource, which Cluster Toolkit would create after
#   destroying the old one (flows/backends/gke/capacity_pools.py).
TPU_GENERATIONS: dict[str, TpuGeneration] = {
    g.name: g
    for g in (
        TpuGeneration("v6e", "tpu-v6e-slice", "tpuv6e", 32 * 10**9, 918.0, "V6E",
                      "examples/gke-tpu-v6e/gke-tpu-v6e-advanced.yaml", "tpuv6e", "gke-tpu-v6e"),
        TpuGeneration("v5p", "tpu-v5p-slice", "tpuv5", 95 * 10**9, 459.0, "V5P", "", "tpuv5p",
                      "gke-tpu-v5p"),
        TpuGeneration("tpu7x", "tpu7x", "tpu7x", 192 * 10**9, 2307.0, "TPU7X",
                      "examples/gke-tpu-7x/gke-tpu-7x-advanced.yaml", "tpu7x", "gke-tpu-7x",
                      devices_per_chip=2),
    )
}


@dataclass(frozen=True)
class TpuMachine:
    machine_type: str
    chips_per_host: int
    generation: str  # a key of TPU_GENERATIONS
    single_host_topologies: tuple[str, ...]
    multi_host_topologies: tuple[str, ...]

    @property
    def facts(self) -> TpuGeneration:
        return TPU_GENERATIONS[self.generation]

    @property
    def accelerator_label(self) -> str:
        return self.facts.accelerator_label

    @property
    def pathways_instance_prefix(self) -> str:
        return self.facts.pathways_instance_prefix


TPU_MACHINES: dict[str, TpuMachine] = {
    m.machine_type: m
    for m in (
        TpuMachine("ct6e-standard-1t", 1, "v6e", ("1x1",), ()),
        # 2x4 on ct6e-standard-4t is two VMs of 4 chips (https://cloud.google.com/tpu/docs/v6e,
        # "Supported configurations": 2x4 attached to 2 VMs is offered through the GKE API only).
        TpuMachine("ct6e-standard-4t", 4, "v6e", ("2x2",),
                   ("2x4", "4x4", "4x8", "8x8", "8x16", "16x16")),
        TpuMachine("ct6e-standard-8t", 8, "v6e", ("2x4",), ()),
        # https://cloud.google.com/tpu/docs/v5p "Configurations": 2x2x1 is one host of four
        # chips; the table's single-slice shapes up to 16x16x24 (6144 chips)
        TpuMachine("ct5p-hightpu-4t", 4, "v5p", ("2x2x1",),
                   ("2x2x2", "2x4x4", "4x4x4", "4x4x8", "4x8x8", "8x8x8", "8x8x16", "8x16x16",
                    "16x16x16", "16x16x24")),
        # Cluster Toolkit's examples/gke-tpu-7x/README.md: 2x2x1 (one node), 2x2x2, 4x4x4;
        # the rest are XPK's default tpu7x-standard-4t topologies up to 8x8x8 (512 chips)
        TpuMachine("tpu7x-standard-4t", 4, "tpu7x", ("2x2x1",),
                   ("2x2x2", "2x2x4", "2x4x4", "4x4x4", "4x4x8", "4x8x8", "8x8x8")),
    )
}

_TOPOLOGY = re.compile(r"^[1-9][0-9]*(x[1-9][0-9]*){1,2}$")


def topology_is_well_formed(topology: str) -> bool:
    return bool(_TOPOLOGY.match(topology))


def chips_in_topology(topology: str) -> int:
    return math.prod(int(side) for side in topology.split("x"))


def supported_topologies(machine: TpuMachine) -> tuple[str, ...]:
    return machine.single_host_topologies + machine.multi_host_topologies


def generation_machines(generation: str) -> tuple[TpuMachine, ...]:
    """The machine types of one generation, in the table's order."""
    return tuple(m for m in TPU_MACHINES.values() if m.generation == generation)
