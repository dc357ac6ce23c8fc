"""A chain of capacity modes over several zones: the edited blueprint has one TPU
pool module per (mode, zone) that passes gke-node-pool's preconditions after gcluster's
expansion, the cluster's node locations hold every zone, Kueue gets a flavor per mode in the
chain's order with queued's admission check on its flavor only, and a deploy against the fake
cloud builds exactly the planned pools, which a second run recognises (nothing deployed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ruamel.yaml import YAML

from flows.backends.gke.capacity_pools import (
    BASE_POOL,
    flavor_name,
    job_node_selector,
    tpu_pools,
)
from flows.backends.gke.infra import clients
from flows.backends.gke.infra.admission import PodSet, assigned_flavor
from flows.backends.gke.infra.blueprint import edit_blueprint, edit_context, find_module
from flows.backends.gke.infra.cluster import pool_mismatches
from flows.backends.gke.infra.commands import blueprint_vars
from flows.backends.gke.infra.infra_stage import run_gke
from flows.backends.gke.infra.kueue_config import planned_kueue
from flows.backends.gke.infra.pool_shape import pool_shape_problems
from flows.backends.gke.infra.settings import settings_from_profile
from flows.config.capacity import CAPACITY_MODES
from tests.fakes.cloud import BLUEPRINT_FIXTURE, Cloud
from tests.fakes.cloud.gcluster_expand import expand
from tests.fakes.cloud.node_pool_rules import precondition_failures
from tests.support.logs import Log
from tests.support.profiles import capacity_profile

ZONES = ("us-east5-b", "us-east5-a", "us-east5-c")
FROM_ZERO = [m for m in CAPACITY_MODES if m != "reservation"]
chains = st.one_of(
    st.lists(st.sampled_from(FROM_ZERO), min_size=1, max_size=4, unique=True),
    st.lists(st.sampled_from(FROM_ZERO), max_size=3, unique=True)
    .map(lambda rest: ["reservation", *rest]))
zone_lists = st.lists(st.sampled_from(ZONES), min_size=1, max_size=3, unique=True)


def _profile(chain: list[str], zones: list[str] | None, slices: int = 1):
    sets = {"gke.num_slices": str(slices)}
    if zones:
        sets.update({"gke.zones": ",".join(zones), "gke.zone": zones[0]})
    return capacity_profile(",".join(chain), **sets)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chain=chains, zones=st.one_of(st.none(), zone_lists), slices=st.sampled_from([1, 2]))
def test_every_pool_of_every_chain_passes_the_toolkits_rules(chain, zones, slices):
    gke = _profile(chain, zones, slices).gke
    s = settings_from_profile(_profile(chain, zones, slices))
    text = edit_blueprint(BLUEPRINT_FIXTURE.read_text(), edit_context(gke))
    doc = YAML(typ="safe").load(text)
    variables = {**doc["vars"], **blueprint_vars(s)}
    pools = tpu_pools(gke)
    ids = [m["id"] for g in doc["deployment_groups"] for m in g["modules"]]
    assert len(ids) == len(set(ids))
    for pool in pools:
        expanded = expand(find_module(doc, pool.module_id)["settings"], variables)
        assert precondition_failures(expanded) == [], (pool, expanded)
        assert expanded["zones"] == [pool.zone]
        assert (expanded.get("static_node_count") is None) is pool.autoscaled
    assert pool_shape_problems(text, gke, blueprint_vars(s)) == []
    assert pools[0].module_id == BASE_POOL  # the example's module, which others reference
    cluster = find_module(doc, "gke-tpu-v6e-cluster")["settings"]
    if zones:
        assert cluster["system_node_pool_zones"] == zones
    else:  # one zone, as before: the cluster's default node locations, untouched
        assert "system_node_pool_zones" not in cluster
    expected = {(m, z) for m in chain for z in (zones or [gke.zone])
                if m != "reservation"} | ({("reservation", gke.zone)} if "reservation" in chain
                                         else set())
    assert {(p.mode, p.zone) for p in pools} == expected


def test_a_pool_missing_its_mode_label_or_zone_is_named_before_deploying():
    gke = _profile(["flex-start", "on-demand"], list(ZONES[:2])).gke
    s = settings_from_profile(_profile(["flex-start", "on-demand"], list(ZONES[:2])))
    doc = YAML(typ="safe").load(edit_blueprint(BLUEPRINT_FIXTURE.read_text(),
                                               edit_context(gke)))
    find_module(doc, "gke-tpu-v6e-od-b")["settings"]["kubernetes_labels"] = {
        "tpurl/capacity": "spot"}
    find_module(doc, "gke-tpu-v6e-flex-a")["settings"]["zones"] = ["us-east5-c"]
    broken = yaml.safe_dump(doc)
    found = {setting for setting, _, _ in pool_shape_problems(broken, gke, blueprint_vars(s))}
    assert {"gke-tpu-v6e-od-b.kubernetes_labels", "gke-tpu-v6e-flex-a.zones"} <= found


@pytest.mark.parametrize("chain", [["reservation", "flex-start", "on-demand"],
                                   ["queued", "spot"], ["on-demand"]])
@pytest.mark.parametrize("slices", [1, 2])
def test_kueue_has_a_flavor_per_mode_in_chain_order_each_admitting_every_slice(chain, slices):
    profile = _profile(chain, list(ZONES[:2]), slices)
    kueue = planned_kueue(settings_from_profile(profile))
    (group,) = kueue["cluster_queue"]["spec"]["resourceGroups"]
    names = [f["name"] for f in group["flavors"]]
    assert names == [*(flavor_name(m) for m in chain), "cpu-np-flavor"]
    chips = profile.gke.total_chips
    for entry in group["flavors"][:-1]:
        quota = {r["name"]: r["nominalQuota"] for r in entry["resources"]}
        assert int(quota["google.com/tpu"]) == chips  # num_slices slices in any one mode
    checks = kueue["cluster_queue"]["spec"].get("admissionChecksStrategy")
    if "queued" in chain:
        assert checks == {"admissionChecks": [{"name": "dws-prov",
                                               "onFlavors": [flavor_name("queued")]}]}
    else:
        assert checks is None


def _tpu_pod(profile: Any, selector: dict[str, str]) -> PodSet:
    gke = profile.gke
    return PodSet("train", "worker", gke.hosts_needed, {"google.com/tpu": 4.0}, {
        "cloud.google.com/gke-tpu-accelerator": gke.machine.accelerator_label,
        "cloud.google.com/gke-tpu-topology": gke.topology, **selector})


@pytest.mark.parametrize("chain", [["reservation", "flex-start", "on-demand", "spot", "queued"],
                                   ["spot", "queued", "on-demand"]])
def test_a_jobset_of_one_mode_gets_that_flavor_and_one_of_none_the_chains_first(chain):
    """Flavor fungibility as Kueue's flavor assigner does it (admission.py): the flavors of
    the group in order, the first whose labels the pod's selection matches. It never moves
    an admitted workload on a stockout (kueue#2560): the train stage resubmits instead."""
    profile = _profile(chain, None)
    kueue = planned_kueue(settings_from_profile(profile))
    (group,) = kueue["cluster_queue"]["spec"]["resourceGroups"]
    for mode in chain:
        pod = _tpu_pod(profile, job_node_selector(mode))
        assert assigned_flavor(pod, group, kueue["flavors"]) == flavor_name(mode)
    assert assigned_flavor(_tpu_pod(profile, {}), group, kueue["flavors"]) == \
        flavor_name(chain[0])


class _NoBucket:
    def lookup_bucket(self, name: str) -> None:
        return None


# Dynamic Workload Scheduler's v6e zones of us-east5 (preflight/zones.py DWS_ZONES): a
# flex-start or queued pool elsewhere is refused before the deploy
DWS_ZONES = ("us-east5-b", "us-east5-a")


def test_a_chain_over_the_zones_deploys_every_pool_once(
        tmp_path: Path, cloud: Cloud, gcs: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(clients, "default_clients", lambda s: (cloud.apis, gcs))
    monkeypatch.setenv("TPURL_CACHE_DIR", str(tmp_path / "cache"))
    profile = _profile(["reservation", "flex-start", "queued"], list(DWS_ZONES))
    s = settings_from_profile(profile)
    assert run_gke(profile, Log()).deployed
    live = cloud.apis.get_cluster(s.gke.project, s.gke.region, s.gke.cluster)
    assert pool_mismatches(live, s) == []
    tpu = {p["name"]: p for p in live["nodePools"] if p["name"] != "cpu-np"}
    assert set(tpu) == {p.name for p in tpu_pools(profile.gke)}
    assert len(tpu) == 1 + 2 * len(DWS_ZONES)
    assert live["locations"] == list(DWS_ZONES)
    assert all(p["queuedProvisioning"] == {"enabled": True} for n, p in tpu.items()
               if "queued" in n)
    again = run_gke(profile, Log())
    assert not again.deployed, "the planned pools were not recognised"


def test_pre_flight_checks_the_quota_of_every_mode_of_the_chain():
    """A mode without quota would wait out its whole budget before the next is tried: the
    check fails naming it; a reservation in the chain needs none."""
    from flows.backends.gke.infra.preflight.capacity import check_quota

    s = settings_from_profile(_profile(["reservation", "on-demand", "spot"], list(ZONES)))
    quotas = [{"metric": "TPU_V6E", "limit": 64.0, "usage": 0.0},
              {"metric": "PREEMPTIBLE-TPU-V6E-per-project-region", "limit": 64.0,
               "usage": 64.0}]
    found = check_quota(s, quotas)
    assert found.status == "fail"
    assert found.issue.problem.startswith("spot: PREEMPTIBLE-TPU-V6E-per-project-region in "
                                          "us-east5: "
                                          "0 chips free, 32 needed")
    quotas[1]["usage"] = 0.0
    ok = check_quota(s, quotas)
    assert ok.status == "ok" and ok.issue.problem.startswith("on-demand: TPU_V6E")
