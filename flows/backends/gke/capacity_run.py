"""The capacity chain of one GKE stage as the backend runs it: the JobSet of each mode, the
record of each mode's attempt, and the event of each fallback. The decisions are
fallback.py's (pure); this mixin of GkeBackend keeps backend.py to the protocol.

Event ``tpurl.capacity.fallback`` (stable name, beside the ``tpurl.stage.*`` events of
flows/runpage/events.py), resource ``tpurl.stage.<profile>.<stage>``, payload: ``from_mode``,
``to_mode``, ``reason`` (the spent mode's diagnosis summary), ``code``, ``attempts`` (each
mode's mode, zone, waited_s, held_s, chip_hours, usd, outcome). Payloads pass the Redactor.
"""

from __future__ import annotations

import dataclasses
import time

from prefect.events import emit_event

from flows.backends.gke.capacity_pools import ZONE_LABEL
from flows.backends.gke.fallback import Attempt, attempts_of
from flows.backends.gke.jobs.common import SPEC_DIGEST
from flows.backends.gke.jobs.manifests import stage_run
from flows.backends.gke.jobs.pathways import HEAD as PATHWAYS_HEAD
from flows.backends.gke.jobs.render import render_jobset
from flows.backends.gke.watch.served import TPU_ACCELERATOR
from flows.common.api_objects import Obj
from flows.common.event_catalogue import CAPACITY_FALLBACK
from flows.config.profile import Profile
from flows.config.spend import ON_SLICE
from flows.core.workload import Workload


def capacity_chain(profile: Profile) -> tuple[str, ...]:
    """The steps to try, in order: each mode of ``gke.capacity``, or with several slices
    and zones each ``mode@zone`` (fallback.attempts_of says why)."""
    gke = profile.gke
    assert gke is not None
    return tuple(f"{mode}@{zone}" if zone else mode for mode, zone in
                 attempts_of(tuple(gke.capacity_chain), gke.zone_order, gke.num_slices))


def step_mode(step: str) -> str:
    return step.split("@", 1)[0]


def pin_zone(jobset: Obj, zone: str) -> Obj:
    """Every TPU pod of the JobSet in ``zone`` (its nodeSelector), and the Pathways head
    with them (jobs/pathways.py says why); other pods on the CPU pool are left alone."""
    for rjob in jobset["spec"]["replicatedJobs"]:
        pod = rjob["template"]["spec"]["template"]["spec"]
        selector = pod.get("nodeSelector") or {}
        if TPU_ACCELERATOR in selector or rjob.get("name") == PATHWAYS_HEAD:
            pod["nodeSelector"] = {**selector, ZONE_LABEL: zone}
    return jobset


def in_mode(profile: Profile, mode: str) -> Profile:
    """The profile as one mode of its chain sees it: the JobSet rendered from it asks for
    that mode's pools (jobs/common.py tpu_pod_scheduling, capacity_pools.py). Not
    revalidated: the chain was, and a mode of it is valid where the chain is."""
    gke = profile.gke
    assert gke is not None
    chain = tuple(gke.capacity_chain)
    if chain[0] == mode:
        return profile
    # the chain kept, the mode first: the JobSet selects the mode's own pool label, which
    # only a cluster with a chain has (jobs/common.py tpu_pod_scheduling)
    first = [mode, *(m for m in chain if m != mode)]
    return profile.model_copy(update={"gke": gke.model_copy(update={"capacity": first})})


class CapacityRun:
    """Mixed into GkeBackend (profile, stage, options, redactor, logger, monitor)."""

    # The type checker reads this class alone, without the GkeBackend attributes it uses:
    # hence the attr-defined ignores on those uses below.

    def _jobset_for(self, workload: Workload, job: str, step: str) -> Obj:
        mode, _, zone = step.partition("@")
        profile = in_mode(self.profile, mode)  # type: ignore[attr-defined]
        jobset = render_jobset(workload, profile, run=stage_run(self.profile, job),  # type: ignore[attr-defined]
                               stage=job, options=self.options)  # type: ignore[attr-defined]
        return pin_zone(jobset, zone) if zone else jobset

    def _step_to_resume(self, workload: Workload, job: str, chain: tuple[str, ...]
                        ) -> tuple[int, Obj]:
        """Which step of the chain this run starts in, and its JobSet: the first, unless the
        cluster holds this run's JobSet as a later step rendered it (a flow that died after
        a fallback): a rerun attaches to what trains instead of refusing it as another
        configuration (recovery.on_conflict compares spec digests). One read, and only for
        a chain of more than one step."""
        first = self._jobset_for(workload, job, chain[0])
        if len(chain) == 1:
            return 0, first
        live = self._get(first["metadata"]["name"])  # type: ignore[attr-defined]
        theirs = ((live or {}).get("metadata", {}).get("annotations") or {}).get(SPEC_DIGEST)
        if theirs is None or live is None or live["metadata"].get("deletionTimestamp"):
            return 0, first
        for index, step in enumerate(chain[1:], start=1):
            desired = self._jobset_for(workload, job, step)
            if desired["metadata"]["annotations"][SPEC_DIGEST] == theirs:
                self.logger.info("%s: the JobSet of this run is the one step %s of the "  # type: ignore[attr-defined]
                                 "capacity chain submitted; attaching to it",
                                 first["metadata"]["name"], step)
                self.fallbacks = index
                return index, desired
        return 0, first

    def _attempt(self, step: str, started: float, outcome: str) -> Attempt:
        """What one mode's attempt waited and held, from the watch's record of when its
        slice's pods were bound (Monitor.served_at) and where (Monitor.served)."""
        monitor, end = self.monitor, time.monotonic()  # type: ignore[attr-defined]
        served = monitor.served if monitor is not None else None
        served_at = monitor.served_at if monitor is not None else None
        bound = served_at if served_at is not None and served_at >= started else None
        held_s = end - bound if bound is not None else 0.0
        gke = self.profile.gke  # type: ignore[attr-defined]
        chips = gke.total_chips if self.stage in ON_SLICE else 0  # type: ignore[attr-defined]
        mode = step_mode(step)
        price = gke.prices.get(mode)
        chip_hours = chips * held_s / 3600
        return Attempt(mode=mode, zone=served.zone if served and bound else "",
                       waited_s=round((bound or end) - started, 3), held_s=round(held_s, 3),
                       chip_hours=round(chip_hours, 6),
                       usd=round(chip_hours * price.usd_per_chip_hour, 4) if price else 0.0,
                       outcome=outcome)

    def _emit_fallback(self, from_mode: str, to_mode: str, reason: str, code: str,
                       attempts: list[Attempt]) -> None:
        """Best effort: an event that cannot be sent must not fail the stage."""
        profile, stage = self.profile.name, self.stage  # type: ignore[attr-defined]
        payload = {"from_mode": from_mode, "to_mode": to_mode,
                   "reason": self.redactor(reason), "code": code,  # type: ignore[attr-defined]
                   "attempts": [dataclasses.asdict(a) for a in attempts]}
        checked = CAPACITY_FALLBACK.checked(payload)  # a key drifting is our bug: not swallowed
        try:
            emit_event(event=CAPACITY_FALLBACK.name, resource={
                "prefect.resource.id": f"tpurl.stage.{profile}.{stage}",
                "prefect.resource.name": f"{profile} · {stage}",
                "tpurl.profile": profile, "tpurl.stage": stage},
                payload=checked)
        except Exception as exc:  # the stage goes on without its event
            self.logger.warning("could not emit %s: %s", CAPACITY_FALLBACK.name,  # type: ignore[attr-defined]
                                self.redactor(str(exc)[:200]))  # type: ignore[attr-defined]
