"""Pre-flight's (mode, zone) check (flows/backends/gke/infra/preflight/zones.py): every pool
the profile asks for must be one its zone can serve; a refusal names the pair, the zones of
the region that can serve the mode, and the gke.zones that would."""

from __future__ import annotations

import re

import pytest
import yaml

from flows.backends.gke.infra.infra_stage import check_text
from flows.backends.gke.infra.preflight.checks import gather, run_checks
from flows.backends.gke.infra.settings import settings_from_profile
from flows.common.paths import REPO_ROOT
from tests.fakes.cloud import FakeGoogleApis
from tests.support.profiles import capacity_profile

CHAIN = "flex-start,on-demand,spot"


def _line(text: str, name: str = "zone-capacity") -> str:
    start = text.index(f"] {name}:") - 8
    end = text.find("\n[", start + 1)
    return text[start:end if end > 0 else None]


def _zone_result(apis: FakeGoogleApis, mode: str, zones: str):
    s = settings_from_profile(capacity_profile(mode, **{"gke.zones": zones, "gke.zone": ""}))
    return next(r for r in run_checks(s, gather(apis, s)) if r.name == "zone-capacity")


def test_flex_start_in_an_undocumented_zone_is_refused_naming_the_pair_and_the_zones(
        cloud) -> None:
    """The recommended chain over every zone of us-east5: flex-start has no v6e in
    us-east5-c (GKE documents DWS's v6e in us-east5-a and -b), so that pool would wait its
    whole budget for nothing."""
    profile = capacity_profile(CHAIN, **{"gke.zones": "us-east5-b,us-east5-a,us-east5-c",
                                         "gke.zone": ""})
    text, ok = check_text(profile, cloud.apis, None)
    line = _line(text)
    assert not ok and line.startswith("[FAIL   ] zone-capacity: ct6e-standard-4t: "), line
    assert ("(flex-start, us-east5-c): Dynamic Workload Scheduler does not serve this TPU "
            "there (zones of us-east5 that serve flex-start: us-east5-a, us-east5-b)") in line
    assert "fix: set gke.zones: [us-east5-b, us-east5-a]" in line, line
    # the pairs the zone can serve are not named
    assert "(on-demand, us-east5-c)" not in line and "(spot, us-east5-c)" not in line


def test_a_zone_without_the_machine_type_fails_every_mode_there(cloud) -> None:
    cloud.apis.machine_type_zones["ct6e-standard-4t"] = {"us-east5-b"}
    found = _zone_result(cloud.apis, "on-demand,spot", "us-east5-b,us-east5-a")
    assert found.status == "fail" and found.issue.field == "gke.zones"
    assert ("(on-demand, us-east5-a): the zone does not offer the machine type (zones of "
            "us-east5 that serve on-demand: us-east5-b)") in found.issue.problem
    assert "(spot, us-east5-a)" in found.issue.problem
    assert found.issue.fix.startswith("set gke.zones: [us-east5-b]")


def test_no_zone_of_the_region_serves_the_chain(cloud) -> None:
    cloud.apis.machine_type_zones["ct6e-standard-4t"] = {"us-east5-c"}
    found = _zone_result(cloud.apis, "flex-start", "us-east5-c")
    assert found.status == "fail"
    assert "zones of us-east5 that serve flex-start: none in us-east5" in found.issue.problem
    assert "choose another gke.region" in found.issue.fix


def test_a_single_tenant_zone_is_a_warning_for_on_demand_and_spot(cloud) -> None:
    found = _zone_result(cloud.apis, "on-demand,spot", "us-east5-b,us-east5-c")
    assert found.status == "warn", found
    assert "(on-demand, us-east5-c), (spot, us-east5-c)" in found.issue.problem
    assert "single-tenant" in found.issue.problem and "gke.zones" in found.issue.fix


def test_served_pairs_pass_and_an_unreadable_listing_is_unknown(cloud) -> None:
    found = _zone_result(cloud.apis, CHAIN, "us-east5-b,us-east5-a")
    assert found.status == "ok", found
    assert "(flex-start, us-east5-b), (flex-start, us-east5-a), (on-demand, us-east5-b)" \
        in found.issue.problem
    cloud.apis.denied.add("zones_offering")
    found = _zone_result(cloud.apis, CHAIN, "us-east5-b,us-east5-a")
    assert found.status == "unknown"
    assert "gcloud compute machine-types list --filter=name=ct6e-standard-4t" in found.issue.fix


@pytest.mark.parametrize("mode", ["queued", "flex-start"])
def test_both_dynamic_workload_scheduler_modes_keep_to_its_zones(mode: str, cloud) -> None:
    """Queued provisioning is GKE's flex-start with --enable-queued-provisioning."""
    found = _zone_result(cloud.apis, mode, "us-east5-c")
    assert found.status == "fail" and f"({mode}, us-east5-c)" in found.issue.problem


def test_the_capacity_how_to_recommends_zones_that_serve_its_chain(cloud) -> None:
    """The how-to's YAML example, checked as a profile would be."""
    page = (REPO_ROOT / "docs" / "how-to" / "capacity.md").read_text()
    block = next(b for b in re.findall(r"```yaml\n(.*?)```", page, re.S) if "zones:" in b)
    gke = yaml.safe_load(block)["gke"]
    found = _zone_result(cloud.apis, ",".join(gke["capacity"]), ",".join(gke["zones"]))
    assert found.status == "ok", found.issue


def test_the_rest_client_reads_the_aggregated_listing() -> None:
    """compute v1 machineTypes.aggregatedList: scopes keyed "zones/ZONE"; a scope the
    filter matched nothing in carries a warning, not machineTypes; pages chain by token."""
    from flows.backends.gke.infra.cloud import RestGoogleApis

    pages = {None: {"items": {
        "zones/us-east5-b": {"machineTypes": [{"name": "ct6e-standard-4t"}]},
        "zones/us-east5-c": {"warning": {"code": "NO_RESULTS_ON_PAGE"}}},
        "nextPageToken": "two"},
        "two": {"items": {"zones/us-east5-a": {"machineTypes": [{"name": "ct6e-standard-4t"}]}}}}
    seen: list[dict] = []

    class _Response:
        status_code = 200

        def __init__(self, body: dict) -> None:
            self.body = body

        def json(self) -> dict:
            return self.body

        def raise_for_status(self) -> None:
            pass

    class _Session:
        def get(self, url: str, timeout: float, params: dict) -> _Response:
            assert url.endswith("/projects/p/aggregated/machineTypes")
            seen.append(dict(params))
            return _Response(pages[params.get("pageToken")])

    zones = RestGoogleApis(session=_Session()).zones_offering("p", "ct6e-standard-4t")
    assert zones == {"us-east5-a", "us-east5-b"}
    assert seen[0]["filter"] == "name = ct6e-standard-4t" and seen[1]["pageToken"] == "two"


@pytest.mark.parametrize(("mode", "status"), [("flex-start", "unknown"), ("queued", "unknown"),
                                              ("spot", "ok")])
def test_a_generation_whose_scheduler_zones_are_undocumented_is_unknown_not_ok(
        mode: str, status: str) -> None:
    """No page read lists where Dynamic Workload Scheduler serves TPU v5p: a flex-start or
    queued pool of it in a zone offering the machine type is not known to get a slice (the
    check says unknown, naming the pair); spot's zones are the machine type's own."""
    from flows.backends.gke.infra.preflight.zones import check_zone_modes

    profile = capacity_profile(mode, **{"gke.machine_type": "ct5p-hightpu-4t",
                                        "gke.topology": "2x4x4", "gke.zone": "us-east5-a"})
    found = check_zone_modes(settings_from_profile(profile), {"us-east5-a"})
    assert found.status == status, found
    if status == "unknown":
        assert found.issue.problem.startswith(
            f"ct5p-hightpu-4t: ({mode}, us-east5-a): Google's pages read list no zones where "
            "Dynamic Workload Scheduler serves TPU v5p")
        assert "put on-demand or spot first in gke.capacity" in found.issue.fix
