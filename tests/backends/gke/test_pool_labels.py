"""flows/backends/gke/capacity_pools.py: each (mode, zone) pool has its own name, and a
JobSet meant for one mode selects that mode's pools only."""

from __future__ import annotations

import itertools

import pytest

from flows.backends.gke.capacity_pools import (
    BASE_POOL,
    CAPACITY_LABEL,
    flavor_name,
    job_node_selector,
    job_tolerations,
    pool_node_labels,
    pool_taints,
    tpu_pools,
)
from flows.config.capacity import CAPACITY_MODES
from tests.support.profiles import capacity_profile

ZONES = "us-east5-b,us-east5-a,us-east5-c"


def _selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def _tolerated(taint: dict[str, str], tolerations: list[dict[str, str]]) -> bool:
    return any(t["key"] == taint["key"] and t["effect"] == taint["effect"]
               and (t["operator"] == "Exists" or t.get("value") == taint["value"])
               for t in tolerations)


@pytest.mark.parametrize(("wanted", "other"), itertools.product(CAPACITY_MODES, repeat=2))
def test_a_job_for_one_mode_lands_on_that_modes_pools_only(wanted, other):
    on_own = pool_node_labels(wanted)
    assert _selects(job_node_selector(wanted), on_own)
    assert all(_tolerated(t, job_tolerations(wanted)) for t in pool_taints(wanted))
    if other != wanted:
        assert not _selects(job_node_selector(wanted), pool_node_labels(other))
        assert flavor_name(wanted) != flavor_name(other)


def test_queued_nodes_are_tainted_and_only_a_queued_job_tolerates_them():
    (taint,) = pool_taints("queued")
    assert taint["key"] == "cloud.google.com/gke-queued"
    assert _tolerated(taint, job_tolerations("queued"))
    assert not _tolerated(taint, job_tolerations("on-demand"))


def test_one_mode_in_one_zone_keeps_the_examples_pool():
    (pool,) = tpu_pools(capacity_profile("on-demand").gke)
    assert pool.name == BASE_POOL and pool.autoscaled


def test_a_chain_over_zones_has_a_pool_per_mode_and_zone_and_one_reservation_pool():
    gke = capacity_profile("reservation,flex-start,on-demand", **{"gke.zones": ZONES}).gke
    pools = tpu_pools(gke)
    assert [(p.mode, p.zone) for p in pools] == [
        ("reservation", "us-east5-b"),
        *[(m, z) for m in ("flex-start", "on-demand") for z in ZONES.split(",")]]
    assert pools[0].name == BASE_POOL and not pools[0].autoscaled
    names = [p.name for p in pools]
    assert len(set(names)) == len(names)
    assert all(len(n) + len("-99") <= 36 for n in names)  # gke-node-pool's name rule
    assert all(pool_node_labels(p.mode)[CAPACITY_LABEL] == p.mode for p in pools)


@pytest.mark.parametrize(("machine_type", "topology", "prefix"),
                         [("ct6e-standard-4t", "4x8", "gke-tpu-v6e"),
                          ("ct5p-hightpu-4t", "2x4x4", "gke-tpu-v5p"),
                          ("tpu7x-standard-4t", "2x2x4", "gke-tpu-7x")])
def test_pool_names_carry_the_generation_and_v6e_keeps_its_deployed_names(
        machine_type: str, topology: str, prefix: str) -> None:
    """A pool's name is its Terraform address: v6e's stay the names deployed clusters have
    (a rename would destroy and recreate the pool); the others name their generation, as
    Cluster Toolkit's examples do (gke-tpu-7x-pool). The first pool's module is always the
    example's, which the others copy."""
    quote = {f"gke.prices.{mode}.{k}": v for mode in ("reservation", "on-demand")
             for k, v in {"usd_per_chip_hour": "3.0", "source": "a quote",
                          "as_of": "2026-12-01"}.items()}
    gke = capacity_profile("reservation,on-demand", **{
        "gke.zones": "us-east5-b,us-east5-a", "gke.machine_type": machine_type,
        "gke.topology": topology, **quote}).gke
    pools = tpu_pools(gke)
    assert [p.name for p in pools] == [f"{prefix}-pool", f"{prefix}-od-b", f"{prefix}-od-a"]
    assert [p.module_id for p in pools] == [BASE_POOL, f"{prefix}-od-b", f"{prefix}-od-a"]
    if prefix == "gke-tpu-v6e":
        assert pools[0].name == BASE_POOL == "gke-tpu-v6e-pool"
