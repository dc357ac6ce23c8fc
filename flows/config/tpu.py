"""Facts about TPU machine types and slice topologies, used to validate profiles and price plans.

Kept as a table (not code paths) so that adding a generation is a data change. Only the
generation the tutorial uses (v6e, Trillium) is listed: a profile naming another machine type
is rejected rather than rendered with guessed labels.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class TpuMachine:
    machine_type: str
    chips_per_host: int
    accelerator_label: str  # value of cloud.google.com/gke-tpu-accelerator
    pathways_instance_prefix: str  # "tpuv6e" → --instance_type=tpuv6e:4x8
    single_host_topologies: tuple[str, ...]
    multi_host_topologies: tuple[str, ...]


TPU_MACHINES: dict[str, TpuMachine] = {
    m.machine_type: m
    for m in (
        TpuMachine("ct6e-standard-1t", 1, "tpu-v6e-slice", "tpuv6e", ("1x1",), ()),
        # 2x4 on ct6e-standard-4t is two VMs of 4 chips (https://cloud.google.com/tpu/docs/v6e,
        # "Supported configurations": 2x4 attached to 2 VMs is offered through the GKE API only).
        TpuMachine("ct6e-standard-4t", 4, "tpu-v6e-slice", "tpuv6e", ("2x2",),
                   ("2x4", "4x4", "4x8", "8x8", "8x16", "16x16")),
        TpuMachine("ct6e-standard-8t", 8, "tpu-v6e-slice", "tpuv6e", ("2x4",), ()),
    )
}

_TOPOLOGY = re.compile(r"^[1-9][0-9]*(x[1-9][0-9]*){1,2}$")


def topology_is_well_formed(topology: str) -> bool:
    return bool(_TOPOLOGY.match(topology))


def chips_in_topology(topology: str) -> int:
    return math.prod(int(side) for side in topology.split("x"))


def supported_topologies(machine: TpuMachine) -> tuple[str, ...]:
    return machine.single_host_topologies + machine.multi_host_topologies
