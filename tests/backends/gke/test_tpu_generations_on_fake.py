"""One training per TPU generation through the GKE path, against the fake cluster.

For each generation the smoke profile is pointed at its smallest multi-host slice (v6e 2x4,
v5p 2x2x2, tpu7x 2x2x2). The cluster is what the profile's blueprint builds: the shipped edits
applied (flows/backends/gke/infra/blueprint.py), expanded and checked as the fake gcluster
does (tests/fakes/cloud/gcluster_expand.py deployed_pools, node_pool_rules.py), the GKE node
pool it reports, and from that pool's machine type and topology an autoscaled node group whose
nodes carry GKE's labels (tests/fakes/kube_api/tpu_nodes.py, from Cluster Toolkit's
tpu-definition, never from flows/config/tpu.py). The train stage's JobSet then runs on it
only if its nodeSelector and tolerations match those nodes, as a scheduler decides.

The expected labels and Pathways types are written out here (GKE's and XPK's values), so a
wrong row of flows/config/tpu.py fails twice: the JobSet never schedules, and the literal
comparison names the field.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from ruamel.yaml import YAML

from flows.backends.gke.capacity_pools import provider_node_labels, tpu_pools
from flows.backends.gke.infra.blueprint import edit_blueprint, edit_context
from flows.backends.gke.infra.commands import blueprint_vars
from flows.backends.gke.infra.kueue_objects import kueue_configuration_text, render_template
from flows.backends.gke.infra.pool_shape import pool_shape_problems
from flows.backends.gke.infra.preflight.generation import check_generation
from flows.backends.gke.infra.settings import settings_from_profile
from flows.backends.gke.jobs.manifests import stage_run
from flows.backends.gke.jobs.render import render_jobset
from flows.config.profile import Profile
from flows.core.failures import StageFailed
from flows.operations.plan import planned_workloads
from tests.fakes.cloud import BLUEPRINT_FIXTURE
from tests.fakes.cloud.gcluster_expand import deployed_pools, node_pool
from tests.fakes.cloud.node_pool_rules import precondition_failures
from tests.fakes.gke_backend import BUDGETS, jobsets_created, run_stage
from tests.fakes.kube_api import FakeApiServer, FakeKube
from tests.fakes.kube_api.node_groups import ClusterAutoscaler, NodeGroup, fits
from tests.fakes.kube_api.scenarios import NS, admit, say, scenario, start, succeed
from tests.fakes.kube_api.store import Script
from tests.fakes.kube_api.tpu_nodes import TOPOLOGY_LABEL, TPU_SELECTOR, TPU_TAINT
from tests.support.polling import until
from tests.support.profiles import QUOTED_PRICE, SMOKE, SMOKE_REQUIRED, fake_hf_token

# generation → (machine type, slice, GKE's accelerator label, Pathways' --instance_type):
# labels as Cluster Toolkit's modules/internal/tpu-definition/main.tf maps the machine family
# (1047080), instance types as XPK's system_characteristics.py pathways_tpu_version (367c838)
SLICES = {"v6e": ("ct6e-standard-4t", "2x4", "tpu-v6e-slice", "tpuv6e:2x4"),
          "v5p": ("ct5p-hightpu-4t", "2x2x2", "tpu-v5p-slice", "tpuv5:2x2x2"),
          "tpu7x": ("tpu7x-standard-4t", "2x2x2", "tpu7x", "tpu7x:2x2x2")}


def generation_profile(generation: str) -> Profile:
    """The smoke profile (on-demand, one zone) on ``generation``'s slice; a quoted price where
    none ships (v5p, tpu7x)."""
    machine_type, topology, _, _ = SLICES[generation]
    price = {} if generation == "v6e" else {
        f"gke.prices.on-demand.{k}": v for k, v in QUOTED_PRICE.items()}
    from flows.config import load_profile

    return load_profile(SMOKE, {**SMOKE_REQUIRED, "gke.machine_type": machine_type,
                                "gke.topology": topology, **price}, environ={})


def deployed_groups(profile: Profile, **settings: Any) -> list[NodeGroup]:
    """The TPU node groups the profile's cluster gets: its edited blueprint through the fake
    gcluster's expansion and rules, each pool as GKE reports it, its nodes labelled by GKE."""
    gke = profile.gke
    assert gke is not None
    text = edit_blueprint(BLUEPRINT_FIXTURE.read_text(), edit_context(gke))
    deploy_vars = blueprint_vars(settings_from_profile(profile))
    assert pool_shape_problems(text, gke, deploy_vars) == []
    doc = YAML(typ="safe").load(text)
    variables = {**doc["vars"], **deploy_vars}
    pools, refused = deployed_pools(doc, variables)
    assert refused == []
    groups = []
    for pool in tpu_pools(gke):
        assert precondition_failures(pools[pool.module_id]) == []
        reported = node_pool(pools[pool.module_id], pool.name, gke.project)
        groups.append(NodeGroup(
            name=pool.name, zone=reported["locations"][0], mode=pool.mode,
            hosts=reported["autoscaling"]["maxNodeCount"],
            machine_type=reported["config"]["machineType"],
            topology=reported["placementPolicy"]["tpuTopology"],
            labels={**reported["config"].get("labels", {}), **provider_node_labels(pool.mode)},
            taints=[TPU_TAINT], **settings))
    return groups


def kueue_tpu_flavor_labels(profile: Profile) -> dict[str, str]:
    """The TPU flavor's nodeLabels as the blueprint's kubectl-apply renders tpurl's Kueue
    template, with the deploy's accelerator_type var (the example's config_template_vars)."""
    gke = profile.gke
    assert gke is not None
    accelerator = blueprint_vars(settings_from_profile(profile))["accelerator_type"]
    text = render_template(kueue_configuration_text(gke), {
        "tpu_quota": "8", "accelerator_type": accelerator, "namespace": "default"})
    flavors = [d for d in yaml.safe_load_all(text) if d and d["kind"] == "ResourceFlavor"
               and d["metadata"]["name"] != "cpu-np-flavor"]
    return dict(flavors[0]["spec"]["nodeLabels"])


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeApiServer]:
    monkeypatch.setenv("HF_TOKEN", fake_hf_token("Qx7kP2mZ9v"))
    with FakeApiServer(FakeKube()) as running:
        yield running


@pytest.mark.parametrize("generation", sorted(SLICES))
def test_one_training_per_generation_on_the_pools_its_blueprint_builds(
        server: FakeApiServer, tmp_path: Path, generation: str) -> None:
    machine_type, topology, accelerator, instance_type = SLICES[generation]
    profile = generation_profile(generation)
    found = check_generation(settings_from_profile(profile))
    assert found is None or found.status != "fail"  # pre-flight lets the slice through
    groups = deployed_groups(profile, provision_s=0.1)
    assert [(g.machine_type, g.topology, g.hosts) for g in groups] == [
        (machine_type, topology, 2)]
    seen: dict[str, Any] = {}

    def look(kube: FakeKube, name: str) -> None:
        """While the program runs: the JobSet as created, and the nodes its pods are on."""
        seen["jobset"] = kube.get("jobsets", NS, name)
        bound = {p["spec"].get("nodeName") for p in kube.find("pods", NS)
                 if TPU_SELECTOR in (p["spec"].get("nodeSelector") or {})}
        seen["nodes"] = [n["metadata"]["labels"] for n in kube.find("nodes", "")
                         if n["metadata"]["name"] in bound]
    run: Script = [(0.05, admit), (0.05, start), (0.05, say("step 1", "saved checkpoint 1")),
                   (0.0, look), (0.1, succeed)]
    scaler = ClusterAutoscaler(server.kube, groups)
    began = time.monotonic()
    try:
        scenario(server.kube, run)
        budgets = dataclasses.replace(BUDGETS, schedule_s=30.0)
        outcome, _logger, _log, _backend = run_stage(server, "train", tmp_path, budgets,
                                                     profile=profile)
        assert not isinstance(outcome, StageFailed), outcome
        assert jobsets_created(server.kube) == 1 and scaler.refused == set()
        assert until(lambda: not scaler.tpu_nodes())  # scaled back to zero
    finally:
        scaler.stop()
    seconds = time.monotonic() - began
    # GKE's labels on the slice's nodes, which the TPU pods were bound to
    assert len(seen["nodes"]) == 2
    for labels in seen["nodes"]:
        assert (labels[TPU_SELECTOR], labels[TOPOLOGY_LABEL]) == (accelerator, topology)
    # the JobSet asked for exactly that, tolerating the TPU taint
    spec = seen["jobset"]["spec"]
    tpu_pods = [rj["template"]["spec"]["template"]["spec"] for rj in spec["replicatedJobs"]
                if TPU_SELECTOR in (rj["template"]["spec"]["template"]["spec"]
                                    .get("nodeSelector") or {})]
    assert tpu_pods
    for pod in tpu_pods:
        assert pod["nodeSelector"][TPU_SELECTOR] == accelerator
        assert pod["nodeSelector"][TOPOLOGY_LABEL] == topology
        assert any(t.get("key") == "google.com/tpu" for t in pod["tolerations"])
    assert f"--instance_type={instance_type}" in repr(spec)
    # Kueue's TPU flavor selects the same nodes (its nodeLabels are copied into the pods)
    flavor = kueue_tpu_flavor_labels(profile)
    assert flavor[TPU_SELECTOR] == accelerator
    assert all(labels.get(k) == v for labels in seen["nodes"] for k, v in flavor.items())
    assert seconds < 30, f"{generation}: {seconds:.1f} s"


def test_a_pool_of_another_generation_never_takes_the_slice() -> None:
    """A v5p JobSet on the pools a v6e profile deploys: the autoscaler finds no group its
    pods fit (NodeAffinity on the accelerator and topology labels), and the scheduler binds
    none of them to the v6e nodes that exist."""
    v5p = generation_profile("v5p")
    workload = planned_workloads(v5p)["train"]
    jobset = render_jobset(workload, v5p, run=stage_run(v5p, "train"), stage="train")
    pod_spec = next(rj["template"]["spec"]["template"]["spec"]
                    for rj in jobset["spec"]["replicatedJobs"]
                    if TPU_SELECTOR in (rj["template"]["spec"]["template"]["spec"]
                                        .get("nodeSelector") or {}))
    pod = {"metadata": {"name": "worker-0", "uid": "u", "labels": {}}, "spec": pod_spec}
    groups = deployed_groups(generation_profile("v6e"))
    assert not fits(pod, groups[0])
    scaler = ClusterAutoscaler(FakeKube(), groups, tick_s=3600.0)
    try:
        assert scaler._best_option([pod], 0.0) is None
        own = deployed_groups(v5p)
        assert fits(pod, own[0])
    finally:
        scaler.stop()


def test_the_train_stage_says_no_pool_holds_a_slice_of_another_generation(
        server: FakeApiServer, tmp_path: Path) -> None:
    """A v5p profile's train stage on a cluster whose one TPU pool is the tutorial's v6e
    slice (the one-pool fake, nodepools.py): the pool never scales up, no pod is bound, and
    the stage fails as a user error naming the pod no pool can hold."""
    from tests.fakes.kube_api.nodepools import Autoscaler, TpuPool

    pool = TpuPool(hosts=2, topology="2x4")
    scaler = Autoscaler(server.kube, pool)
    try:
        scenario(server.kube, [(0.05, admit), (0.05, start), (0.1, succeed)])
        budgets = dataclasses.replace(BUDGETS, schedule_s=3.0)
        outcome, *_ = run_stage(server, "train", tmp_path, budgets,
                                profile=generation_profile("v5p"))
        assert isinstance(outcome, StageFailed), outcome
        assert "no node pool can hold pod" in str(outcome)
        assert [n for _, n in pool.history] == [0]
        assert not [p for p in server.kube.find("pods", NS) if p["spec"].get("nodeName")
                    and TPU_SELECTOR in (p["spec"].get("nodeSelector") or {})]
    finally:
        scaler.stop()
