"""The Pathways head in its slice's zone (jobs/pathways.py): pinned by
``topology.kubernetes.io/zone`` when the zone is known before the slice exists, with the
slice's workers when a fallback step pins one, and left to the scheduler otherwise."""

from __future__ import annotations

from typing import Any

from flows.backends.gke.capacity_run import capacity_chain, pin_zone
from flows.backends.gke.jobs.manifests import render_all
from flows.backends.gke.jobs.pathways import HEAD, WORKER
from flows.config import Profile
from flows.config.gke_section import gke_section
from flows.operations.plan import planned_workloads
from tests.support.profiles import capacity_overrides, tutorial_profile

ZONE = "topology.kubernetes.io/zone"


def _train(profile: Profile) -> dict[str, Any]:
    return next(o for o in render_all(profile, planned_workloads(profile))
                if o["kind"] == "JobSet" and o["metadata"]["labels"].get("tpurl/stage") == "train")


def _pods(jobset: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["name"]: r["template"]["spec"]["template"]["spec"]
            for r in jobset["spec"]["replicatedJobs"]}


def test_a_reservation_slice_has_its_head_in_the_reservations_zone() -> None:
    head = _pods(_train(tutorial_profile()))[HEAD]
    assert head["nodeSelector"] == {"cloud.google.com/gke-nodepool": "cpu-np",
                                    ZONE: "us-east5-b"}


def test_one_zone_pins_the_head_several_leave_it_to_the_scheduler() -> None:
    one = tutorial_profile(**capacity_overrides("on-demand"), **{"gke.zone": "us-east5-a"})
    assert _pods(_train(one))[HEAD]["nodeSelector"][ZONE] == "us-east5-a"
    several = tutorial_profile(**capacity_overrides("on-demand,spot"),
                               **{"gke.zones": "us-east5-b,us-east5-a", "gke.zone": ""})
    pods = _pods(_train(several))
    assert ZONE not in pods[HEAD]["nodeSelector"] and ZONE not in pods[WORKER]["nodeSelector"]


def test_a_fallback_step_pins_the_head_with_its_workers() -> None:
    profile = tutorial_profile(**capacity_overrides("on-demand"), **{
        "gke.zones": "us-east5-b,us-east5-a", "gke.zone": "", "gke.num_slices": "2"})
    assert capacity_chain(gke_section(profile)) == ("on-demand@us-east5-b", "on-demand@us-east5-a")
    pods = _pods(pin_zone(_train(profile), "us-east5-a"))
    assert pods[HEAD]["nodeSelector"][ZONE] == "us-east5-a"
    assert pods[WORKER]["nodeSelector"][ZONE] == "us-east5-a"
    assert pods[HEAD]["nodeSelector"]["cloud.google.com/gke-nodepool"] == "cpu-np"
