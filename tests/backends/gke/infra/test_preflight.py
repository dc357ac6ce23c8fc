"""Pre-flight: every failure names its fix; unreadable facts say so instead of passing."""

from __future__ import annotations

import pytest

from flows.backends.gke.infra.preflight.checks import (
    FactError,
    check_bucket_access,
    failures,
    gather,
    render_checks,
    run_checks,
)
from flows.backends.gke.infra.settings import InfraSettings
from tests.fakes.cloud import FakeGoogleApis
from tests.support.profiles import with_gke

# the team principal of a profile in no team, with the project's number once the infra stage
# read it (a check before that compares it without the number)
POD = ("principal://iam.googleapis.com/projects/123456789012/locations/global/"
       "workloadIdentityPools/my-proj-123.svc.id.goog/subject/ns/default/sa/default")
NP = "serviceAccount:tpurl-v6e-gke-np-sa@my-proj-123.iam.gserviceaccount.com"


@pytest.fixture
def apis(cloud) -> FakeGoogleApis:  # the fake cloud's state file is the seam's backing
    return cloud.apis


def _by_name(results):
    return {r.name: r for r in results}


def test_all_good(settings: InfraSettings, apis: FakeGoogleApis) -> None:
    results = run_checks(settings, gather(apis, settings))
    assert failures(results) == []
    assert {r.name for r in results} == {"authorized_cidr", "apis", "reservation", "tpu-quota",
                                         "jobset", "kueue", "bucket-metadata-access",
                                         "operator-permissions", "zone-capacity"}


FAILURES = {
    "apis": (lambda a: a.services.discard("container.googleapis.com"),
             "gcloud services enable container.googleapis.com --project=my-proj-123"),
    "reservation": (lambda a: setattr(a, "reservation", None),
                    "gcloud compute reservations list --project=my-proj-123 "
                    "--filter=zone:us-east5-b"),
}  # tpu-quota: the tutorial's reservation needs none; its failures per mode are below


@pytest.mark.parametrize("name", sorted(FAILURES))
def test_each_failure_prints_its_fix(name: str, settings: InfraSettings,
                                     apis: FakeGoogleApis) -> None:
    breaks, fix = FAILURES[name]
    breaks(apis)
    results = run_checks(settings, gather(apis, settings))
    (failed,) = failures(results)
    assert failed.name == name
    text = render_checks(results)
    assert f"[FAIL   ] {name}:" in text and fix in text


def test_reservation_too_small_or_wrong_machine(settings: InfraSettings,
                                                apis: FakeGoogleApis) -> None:
    assert apis.reservation is not None
    apis.reservation["specificReservation"]["inUseCount"] = "4"
    result = _by_name(run_checks(settings, gather(apis, settings)))["reservation"]
    assert result.status == "fail" and "4 free of 8 hosts" in result.issue.problem
    assert "larger reservation" in result.render()
    apis.reservation["specificReservation"]["instanceProperties"]["machineType"] = "ct5lp-hightpu-4t"
    result = _by_name(run_checks(settings, gather(apis, settings)))["reservation"]
    assert "reserves ct5lp-hightpu-4t" in result.issue.problem and "fix:" in result.render()


@pytest.mark.parametrize("addons,bad", [
    ({"jobset": "v0.8.1", "jobset_api_versions": ["v1alpha2"], "kueue": "v0.15.2"}, "jobset"),
    ({"jobset": "v0.10.1", "jobset_api_versions": ["v1alpha1"], "kueue": "v0.15.2"}, "jobset"),
    ({"jobset": "v0.10.1", "jobset_api_versions": ["v1alpha2"], "kueue": "v0.9.1"}, "kueue"),
    ({"jobset": None, "jobset_api_versions": [], "kueue": None}, "jobset"),
])
def test_old_jobset_or_kueue_on_an_existing_cluster(addons, bad, settings: InfraSettings,
                                                    apis: FakeGoogleApis, cloud) -> None:
    state = cloud.state()
    state["clusters"]["tpurl-v6e"] = {"name": "tpurl-v6e", "status": "RUNNING", "nodePools": []}
    (cloud.home / "state.json").write_text(__import__("json").dumps(state))
    apis.addons = addons
    results = _by_name(run_checks(settings, gather(apis, settings)))
    assert results[bad].status == "fail"
    assert "re-apply the blueprint" in results[bad].render()


def test_bucket_metadata_trap(settings: InfraSettings) -> None:
    object_admin_only = {"bindings": [{"role": "roles/storage.objectAdmin",
                                       "members": [POD, NP]}]}
    result = check_bucket_access(settings, {"bindings": []}, object_admin_only, planned=False)
    assert result.status == "fail"
    assert "bucket not found" in result.issue.problem and "legacyBucketReader" in result.render()
    # before the infra stage, the grants it will make count
    assert check_bucket_access(settings, {"bindings": []}, object_admin_only).status == "ok"
    reader = {"bindings": [{"role": "roles/storage.legacyBucketReader", "members": [POD, NP]}]}
    assert check_bucket_access(settings, {}, reader, planned=False).status == "ok"


def test_unreadable_facts_are_unknown_with_a_fix(settings: InfraSettings,
                                                 apis: FakeGoogleApis) -> None:
    apis.denied = {"enabled_services", "region_quotas", "project_iam_policy"}
    on_demand = with_gke(settings, capacity="on-demand", reservation=None)
    results = _by_name(run_checks(on_demand, gather(apis, on_demand)))
    for name in ("apis", "tpu-quota", "bucket-metadata-access"):
        assert results[name].status == "unknown"
        assert "could not be read" in results[name].issue.problem and results[name].issue.fix
    assert failures(list(results.values())) == []
    # the reservation's pool needs no TPU quota, read or not
    reserved = _by_name(run_checks(settings, gather(apis, settings)))["tpu-quota"]
    assert reserved.status == "ok"


def test_world_open_cidr_is_a_loud_warning(settings: InfraSettings,
                                           apis: FakeGoogleApis) -> None:
    world = with_gke(settings, authorized_cidr="0.0.0.0/0")
    result = _by_name(run_checks(world, gather(apis, world)))["authorized_cidr"]
    assert result.status == "warn" and "whole internet" in result.issue.problem
    assert isinstance(FactError("x"), FactError)


def test_an_autoscaled_pool_at_zero_nodes_holds_no_quota(settings: InfraSettings) -> None:
    """The quota check counted a matching pool's chips as already held, which is right for the
    reservation's static pool but not for a pool that scales from zero: with the region's 32
    chips used by someone else, an on-demand slice cannot come up, and the check said ok."""
    from flows.backends.gke.infra.preflight.checks import check_quota

    on_demand = with_gke(settings, capacity="on-demand", reservation=None)
    pool = {"name": "gke-tpu-v6e-pool-0", "status": "RUNNING",
            "config": {"machineType": "ct6e-standard-4t",
                       "reservationAffinity": {"consumeReservationType": "NO_RESERVATION"}},
            "autoscaling": {"enabled": True, "maxNodeCount": 8},
            "placementPolicy": {"tpuTopology": "4x8"}}
    cluster = {"status": "RUNNING", "nodePools": [pool]}
    used = [{"metric": ON_DEMAND_METRIC, "limit": 32.0, "usage": 32.0}]
    assert cluster["nodePools"]  # the matching pool at zero nodes holds nothing
    result = check_quota(on_demand, used)
    assert result.status == "fail" and "0 chips free, 32 needed" in result.issue.problem
    # the reservation's pool takes the reservation's hosts, not TPU quota (GKE's TPU
    # troubleshooting page: a node pool that uses a TPU reservation needs no TPU quota)
    assert check_quota(settings, used).status == "ok"


# The spot one is Cloud Quotas' id of v6e's preemptible quota as a listing spells a metric
# (preflight/quota_names.py); v6e's on-demand quota has no id of its own (the family quota),
# so the on-demand name is the one a listing would give it, were there one
ON_DEMAND_METRIC, SPOT_METRIC = "TPU_V6E", "PREEMPTIBLE_TPU_V6E"


def _quota_line(mode: str, apis: FakeGoogleApis, free: dict[str, float]) -> str:
    """`tpurl plan --check`'s tpu-quota line (entry.check_text) for the region's two TPU
    metrics, each with ``free`` chips of a 64-chip limit."""
    from flows.backends.gke.infra.infra_stage import check_text
    from tests.support.profiles import capacity_profile

    apis.quotas = [{"metric": m, "limit": 64.0, "usage": 64.0 - free[m]}
                   for m in (ON_DEMAND_METRIC, SPOT_METRIC)]
    text, _ok = check_text(capacity_profile(mode), apis, None)
    start = text.index("] tpu-quota:") - 8
    return text[start:text.find("\n[", start + 1)]


# The mode → the metric its VMs count against (None: either, flex-start's is unconfirmed;
# "": none, a pool on a TPU reservation needs no TPU quota, GKE's TPU troubleshooting page)
COUNTED = {"reservation": "", "on-demand": ON_DEMAND_METRIC,
           "spot": SPOT_METRIC, "flex-start": None}


@pytest.mark.parametrize("mode", sorted(COUNTED))
def test_each_mode_checks_the_quota_its_vms_count_against(mode: str,
                                                          apis: FakeGoogleApis) -> None:
    """Spot was checked against any v6e metric, the on-demand one included, so a project
    with on-demand quota and no preemptible quota passed, and its spot slice could never
    come up (and the other way round for on-demand)."""
    counted = COUNTED[mode]
    for full in (ON_DEMAND_METRIC, SPOT_METRIC):
        line = _quota_line(mode, apis, {ON_DEMAND_METRIC: 0.0, SPOT_METRIC: 0.0, full: 64.0})
        if counted == "":  # a reservation profile with no TPU quota at all passes
            assert line.startswith("[OK     ] tpu-quota: capacity reservation: the pool's VMs "
                                   "use my-v6e-res's hosts, which need no TPU quota"), line
        elif counted in (None, full):
            assert line.startswith(f"[OK     ] tpu-quota: {full}: 64 chips free"), line
        else:
            assert line.startswith(f"[FAIL   ] tpu-quota: {counted} in us-east5: 0 chips "
                                   "free, 32 needed"), line
            assert f"fix: request a quota increase for {counted} in https://console.cloud" \
                   ".google.com/iam-admin/quotas?project=my-proj-123" in line, line
            label = "Preemptible TPU v6e" if mode == "spot" else "TPU v6e"
            assert f"(filter: {label}, region us-east5)" in line, line


def test_spot_without_a_preemptible_metric_says_which_quota_it_needs(
        apis: FakeGoogleApis) -> None:
    from flows.backends.gke.infra.preflight.checks import check_quota
    from flows.backends.gke.infra.settings import settings_from_profile
    from tests.support.profiles import capacity_profile

    s = settings_from_profile(capacity_profile("spot"))
    found = check_quota(s, [{"metric": ON_DEMAND_METRIC, "limit": 64.0, "usage": 0.0}])
    assert found.status == "unknown"
    assert found.issue.problem == (
        "no preemptible V6E TPU quota metric (PREEMPTIBLE_…V6E…) in us-east5's quota listing "
        "(compute regions.get, which is reported to carry only older TPU metrics, not TPU "
        "v6e's); spot VMs count against the preemptible TPU quota, not the on-demand one")
    assert found.issue.fix == (
        "read it from Cloud Quotas: `gcloud beta quotas info describe PREEMPTIBLE-TPU-V6E-per-"
        "project-region --service=compute.googleapis.com --project=my-proj-123`, the value for "
        "region us-east5; request 32 chips in us-east5 if it is short")


@pytest.mark.parametrize("mode", ["on-demand", "spot", "flex-start"])
def test_the_fakes_listing_like_googles_lacks_v6e_so_the_check_is_unknown(
        mode: str, apis: FakeGoogleApis) -> None:
    """The regional listing is reported to carry v5e's TPU metrics only: the check never
    says ok or fail on it for v6e, and names the Cloud Quotas id the mode counts against;
    the family-wide on-demand quota (no generation in its name) never matches."""
    from flows.backends.gke.infra.preflight.checks import check_quota
    from flows.backends.gke.infra.settings import settings_from_profile
    from tests.support.profiles import capacity_profile

    family = {"metric": "TPUS_PER_TPU_FAMILY", "limit": 64.0, "usage": 0.0}
    found = check_quota(settings_from_profile(capacity_profile(mode)), [*apis.quotas, family])
    assert found.status == "unknown", found
    family_id, spot_id = "TPUS-PER-TPU-FAMILY-per-project-region", \
        "PREEMPTIBLE-TPU-V6E-per-project-region"
    ids = {"on-demand": [family_id], "spot": [spot_id], "flex-start": [spot_id, family_id]}[mode]
    for quota in ids:
        assert (f"`gcloud beta quotas info describe {quota} --service=compute.googleapis.com "
                "--project=my-proj-123`") in found.issue.fix, found.issue.fix
    assert ("(dimension tpu_family=CT6E)" in found.issue.fix) == (family_id in ids)
    assert found.issue.fix.count("gcloud beta quotas") == len(ids)


@pytest.mark.parametrize(("generation", "kind", "expected"), [
    ("v5p", False, ["TPU-V5P-per-project-region"]),
    ("v5p", True, ["PREEMPTIBLE-TPU-V5P-per-project-region"]),
    ("tpu7x", True, ["PREEMPTIBLE-TPU7X-per-project-region"]),
    ("tpu7x", False, []),  # reported to be the family quota, under a value nobody gives
    ("tpu7x", None, ["PREEMPTIBLE-TPU7X-per-project-region"]),
    ("v6e", None, ["PREEMPTIBLE-TPU-V6E-per-project-region",
                   "TPUS-PER-TPU-FAMILY-per-project-region"]),
])
def test_each_generation_and_mode_names_its_quota_id_or_none(generation: str, kind: bool | None,
                                                             expected: list[str]) -> None:
    from types import SimpleNamespace

    from flows.backends.gke.infra.preflight.capacity import _read_it
    from flows.backends.gke.infra.preflight.quota_names import quota_ids

    assert [q.id for q in quota_ids(generation, kind)] == expected
    gke = SimpleNamespace(machine=SimpleNamespace(generation=generation), total_chips=64,
                          region="us-central1", project="p")
    fix = _read_it(SimpleNamespace(gke=gke), kind, "TPU x", "CONSOLE")  # type: ignore[arg-type]
    if expected:
        assert all(f"describe {i} --service=compute.googleapis.com --project=p" in fix
                   for i in expected), fix
    else:
        assert fix.startswith("no id of TPU tpu7x's on-demand quota is documented or "
                              "reported: check the TPU x quota in CONSOLE"), fix


def test_a_listed_metric_matches_in_either_spelling_and_by_kind() -> None:
    from flows.backends.gke.infra.preflight.quota_names import QUOTAS, metric_matches

    assert QUOTAS["v5p"].preemptible is not None
    assert QUOTAS["v5p"].preemptible.metric == "PREEMPTIBLE_TPU_V5P"
    for spelt in ("PREEMPTIBLE_TPU_V5P", "PREEMPTIBLE-TPU-V5P-per-project-region"):
        assert metric_matches(spelt, "V5P", True) and not metric_matches(spelt, "V5P", False)
    assert metric_matches("TPU_V5P", "V5P", False)
    assert not metric_matches("TPU_LITE_PODSLICE_V5", "V5P", False)
    assert not metric_matches("TPUS_PER_TPU_FAMILY", "V6E", False)
