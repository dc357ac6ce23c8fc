"""Pre-flight: whether the cluster's blueprint can build a pool of the profile's TPU generation.

The blueprint is Cluster Toolkit's v6e example edited (flows/backends/gke/infra/blueprint.py,
``BLUEPRINT_EXAMPLE``): its TPU pool is gke-node-pool with ``placement_policy.tpu_topology``.
That pool shape holds for another generation only where GKE builds that generation's
multi-host pools the same way:

- tpu7x (Ironwood): not for several hosts. GKE's Ironwood page (cloud.google.com/
  kubernetes-engine/docs/concepts/tpu-ironwood, "Workload policy for multi-host node pools"):
  a multi-host pool takes a workload policy through ``--placement-policy``, which "replaces
  the --tpu-topology flag used by other TPU versions". The blueprint's edits for a multi-host
  tpu7x slice add it as Cluster Toolkit's examples/gke-tpu-7x/gke-tpu-7x-advanced.yaml does
  (deployments/blueprints/, edits tpu7x-workload-policy and tpu7x-pool-uses-workload-policy);
  the line says so. A single host (2x2x1) needs none.
- v5p: GKE builds its pools with ``--tpu-topology`` as v6e's, but Cluster Toolkit ships no v5p
  GKE example to compare the pool's settings with: a warning, not a refusal.

v6e, the example's own generation, gets no line: its pre-flight reads as it always did.
"""

from __future__ import annotations

from flows.backends.gke.infra.preflight.results import CheckResult, result
from flows.backends.gke.infra.settings import InfraSettings

NAME = "tpu-generation"


def check_generation(s: InfraSettings) -> CheckResult | None:
    """None for v6e; ok for tpu7x (a multi-host slice through its workload policy); a
    warning for v5p."""
    g = s.gke
    generation = g.machine.generation
    if generation == "v6e":
        return None
    multi_host = g.chips_per_slice > g.chips_per_host
    if generation == "tpu7x" and multi_host:
        return result(NAME, "ok", f"{g.machine_type} {g.topology} is a multi-host Ironwood "
                      "slice: the blueprint adds a HIGH_THROUGHPUT workload policy of "
                      f"accelerator_topology {g.topology} and attaches it to the TPU pool in "
                      "place of tpu_topology, as Cluster Toolkit's examples/gke-tpu-7x does")
    if generation == "tpu7x":
        return result(NAME, "ok", f"{g.machine_type} {g.topology} is one host: the pool needs "
                      "no workload policy")
    return result(NAME, "warn", f"{g.machine_type}: the blueprint's TPU pool copies Cluster "
                  "Toolkit's v6e example with this machine type and gke.topology as "
                  "tpu_topology; Cluster Toolkit ships no v5p GKE example to confirm its "
                  "settings", "deploy once with a small slice (2x2x1) before a large one")
