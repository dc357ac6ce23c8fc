"""gke.zones and a chain of capacity modes: what a profile may say, what it is
refused for (naming the field and the fix), and the values every layer reads
(``zone_order``, ``capacity_chain``). One test per rule; the modes and zone-list shapes
are generated (hypothesis) where the rule must hold for all of them."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flows.config import ProfileError, load_profile
from flows.config.capacity import CAPACITY_MODES, MAX_RUN_MODES
from tests.support.profiles import INFRA_OVERRIDES, TUTORIAL, capacity_overrides

REGION_ZONES = ("us-east5-a", "us-east5-b", "us-east5-c")
NO_RESERVATION = tuple(m for m in CAPACITY_MODES if m != "reservation")


def _load(**sets: str):
    return load_profile(TUTORIAL, {**INFRA_OVERRIDES, **sets}, environ={})


def _issues(**sets: str) -> dict[str, str]:
    with pytest.raises(ProfileError) as err:
        _load(**sets)
    return {i.field: f"{i.problem} || {i.fix}" for i in err.value.issues}


# chains: no repeats, a reservation only first (the rule under test elsewhere)
chains = st.one_of(
    st.lists(st.sampled_from(NO_RESERVATION), min_size=1, max_size=4, unique=True),
    st.lists(st.sampled_from(NO_RESERVATION), min_size=0, max_size=3, unique=True)
    .map(lambda rest: ["reservation", *rest]))
zone_lists = st.lists(st.sampled_from(REGION_ZONES), min_size=1, max_size=3, unique=True)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chain=chains, zones=zone_lists, zone_given=st.booleans())
def test_every_chain_over_every_zone_list_loads_with_its_order(chain, zones, zone_given):
    sets = {**capacity_overrides(",".join(chain)), "gke.zones": ",".join(zones)}
    sets["gke.zone"] = zones[0] if zone_given else ""
    gke = _load(**sets).gke
    assert gke is not None
    assert gke.capacity_chain == tuple(chain)
    assert gke.zone_order == tuple(zones) and gke.zone == zones[0]
    assert gke.scales_from_zero == ("reservation" not in chain)
    assert gke.bounded_run == bool(MAX_RUN_MODES & set(chain))
    assert gke.usd_per_chip_hour == gke.mode_usd_per_chip_hour(chain[0])
    assert gke.mode_usd_per_chip_hour(gke.priciest_mode) == max(
        gke.mode_usd_per_chip_hour(m) for m in chain)


@pytest.mark.parametrize("mode", CAPACITY_MODES)
def test_one_mode_and_one_zone_stay_what_they_were(mode):
    gke = _load(**capacity_overrides(mode)).gke
    assert gke is not None
    assert gke.capacity == mode and gke.capacity_chain == (mode,)
    assert gke.zones is None and gke.zone_order == (gke.zone,)


def test_a_list_of_one_mode_is_that_mode():
    gke = _load(**{**capacity_overrides("on-demand"), "gke.capacity": "on-demand,"}).gke
    assert gke is not None and gke.capacity == "on-demand"


def test_the_infra_key_of_a_profile_without_zones_is_unchanged():
    gke = _load().gke
    assert gke is not None
    assert "zones" not in gke.infra_key_parts()[1]
    with_zones = _load(**{"gke.zones": "us-east5-b,us-east5-a"}).gke
    assert with_zones is not None and with_zones.infra_key_parts()[1]["zones"] == [
        "us-east5-b", "us-east5-a"]


@pytest.mark.parametrize(("sets", "field", "words"), [
    ({"gke.capacity": "on-demand,on-demand"}, "gke.capacity", "more than once"),
    ({"gke.capacity": "on-demand,reservation"}, "gke.capacity", "tried first"),
    ({"gke.capacity": "on-demand,dws"}, "gke.capacity", "'dws' is not a capacity mode"),
    ({"gke.zones": "us-east5-b,us-east5-b"}, "gke.zones", "more than once"),
    ({"gke.zones": "us-east5-b,us-central1-a"}, "gke.zones", "not in region"),
    ({"gke.zones": "us-east5-a,us-east5-b"}, "gke.zone", "starts with 'us-east5-a'"),
])
def test_a_bad_chain_or_zone_list_names_the_field_and_the_fix(sets, field, words):
    found = _issues(**{**capacity_overrides("on-demand"), "gke.zone": "us-east5-b", **sets})
    assert field in found, found
    problem, fix = found[field].split(" || ")
    assert words in problem
    assert field in fix or "gke.capacity" in fix or "gke.zones" in fix


@pytest.mark.parametrize("mode", ["spot", "flex-start", "queued"])
def test_every_mode_of_a_chain_needs_its_price(mode):
    sets = {**capacity_overrides(f"on-demand,{mode}")}
    sets = {k: v for k, v in sets.items() if not k.startswith(f"gke.prices.{mode}.")}
    found = _issues(**sets)
    assert found["gke.prices"].startswith(f"no price for capacity '{mode}'"), found


@pytest.mark.parametrize("bounded", sorted(MAX_RUN_MODES))
def test_max_run_hours_is_required_by_a_bounded_mode_anywhere_in_the_chain(bounded):
    sets = {**capacity_overrides(f"on-demand,{bounded}"), "gke.max_run_hours": ""}
    assert "gke.max_run_hours" in _issues(**sets)
    no_bounded = {**capacity_overrides("on-demand,spot"), "gke.max_run_hours": "12"}
    assert "flex-start and queued only" in _issues(**no_bounded)["gke.max_run_hours"]


def test_a_reservation_is_refused_without_its_mode_and_required_with_it():
    found = _issues(**{**capacity_overrides("on-demand,spot"), "gke.reservation": "res-1"})
    assert "put reservation first in gke.capacity" in found["gke.reservation"]
    assert "gke.reservation" in _issues(**{**capacity_overrides("reservation,on-demand"),
                                           "gke.reservation": ""})


def test_spot_anywhere_in_the_chain_needs_a_preemption_budget():
    found = _issues(**{**capacity_overrides("on-demand,spot"), "gke.preemption_budget": "0"})
    assert "gke.preemption_budget" in found


def test_zone_may_be_left_out_when_zones_are_given_but_not_both():
    gke = _load(**{"gke.zone": "", "gke.zones": "us-east5-c,us-east5-a"}).gke
    assert gke is not None and gke.zone == "us-east5-c"
    found = _issues(**{"gke.zone": ""})
    assert "gke.zone" in found and "required" in found["gke.zone"]
