"""Pre-flight: whether the cluster's blueprint can build a pool of the profile's TPU generation.

The blueprint is Cluster Toolkit's v6e example edited (flows/backends/gke/infra/blueprint.py,
``BLUEPRINT_EXAMPLE``): its TPU pool is gke-node-pool with ``placement_policy.tpu_topology``.
That pool shape holds for another generation only where GKE builds that generation's
multi-host pools the same way:

- tpu7x (Ironwood): no. GKE's Ironwood page (cloud.google.com/kubernetes-engine/docs/concepts/
  tpu-ironwood, "Workload policy for multi-host node pools"): a multi-host pool takes a
  workload policy through ``--placement-policy``, which "replaces the --tpu-topology flag used
  by other TPU versions"; Cluster Toolkit's examples/gke-tpu-7x/gke-tpu-7x-advanced.yaml adds a
  modules/compute/resource-policy ``workload_policy`` (HIGH_THROUGHPUT, accelerator_topology)
  to its pool. A single host (2x2x1) needs none.
- v5p: GKE builds its pools with ``--tpu-topology`` as v6e's, but Cluster Toolkit ships no v5p
  GKE example to compare the pool's settings with: a warning, not a refusal.

v6e, the example's own generation, gets no line: its pre-flight reads as it always did.
"""

from __future__ import annotations

from flows.backends.gke.infra.preflight.results import CheckResult, result
from flows.backends.gke.infra.settings import InfraSettings

NAME = "tpu-generation"


def check_generation(s: InfraSettings) -> CheckResult | None:
    """None for v6e; a failure for a multi-host tpu7x slice; a warning for v5p."""
    g = s.gke
    generation = g.machine.generation
    if generation == "v6e":
        return None
    multi_host = g.chips_per_slice > g.chips_per_host
    if generation == "tpu7x" and multi_host:
        return result(NAME, "fail", f"{g.machine_type} {g.topology} is a multi-host Ironwood "
                      "slice: GKE builds it with a workload policy in place of --tpu-topology, "
                      "and the blueprint's pool (Cluster Toolkit's v6e example) sets "
                      "tpu_topology", "set gke.topology: 2x2x1 (one host, no policy needed), "
                      "or gke.machine_type of v6e or v5p; a multi-host tpu7x pool needs "
                      "Cluster Toolkit's examples/gke-tpu-7x blueprint, which tpurl does not "
                      "edit")
    if generation == "tpu7x":
        return result(NAME, "ok", f"{g.machine_type} {g.topology} is one host: the pool needs "
                      "no workload policy")
    return result(NAME, "warn", f"{g.machine_type}: the blueprint's TPU pool copies Cluster "
                  "Toolkit's v6e example with this machine type and gke.topology as "
                  "tpu_topology; Cluster Toolkit ships no v5p GKE example to confirm its "
                  "settings", "deploy once with a small slice (2x2x1) before a large one")
