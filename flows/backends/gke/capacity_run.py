"""The capacity chain of one GKE stage as the backend runs it: the JobSet of each step, the
step a rerun resumes in, the record of each step's attempt, and the event of each fallback.
Whether to fall back is next_action.py's decision (pure); GkeBackend holds one CapacityRun
per stage and asks it for the rest.

Event ``tpurl.capacity.fallback`` (stable name, beside the ``tpurl.stage.*`` events of
flows/runpage/events.py), resource ``tpurl.stage.<profile>.<stage>``, payload: ``from_mode``,
``to_mode``, ``reason`` (the spent mode's diagnosis summary), ``code``, ``attempts`` (each
mode's mode, zone, waited_s, held_s, chip_hours, usd, outcome). Payloads pass the Redactor.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

from prefect.events import emit_event

from flows.backends.gke.capacity_pools import ZONE_LABEL
from flows.backends.gke.fallback import Attempt, attempts_of
from flows.backends.gke.jobs.common import SPEC_DIGEST
from flows.backends.gke.jobs.manifests import stage_run
from flows.backends.gke.jobs.options import GkeOptions
from flows.backends.gke.jobs.pathways import HEAD as PATHWAYS_HEAD
from flows.backends.gke.jobs.render import render_jobset
from flows.backends.gke.watch.monitor import Monitor
from flows.backends.gke.watch.served import TPU_ACCELERATOR
from flows.common.api_objects import Obj
from flows.common.event_catalogue import CAPACITY_FALLBACK
from flows.config.gke import GkeSection
from flows.config.gke_section import gke_section
from flows.config.profile import Profile
from flows.config.spend import ON_SLICE
from flows.core.backend import StageLogger
from flows.core.secrets import Redactor
from flows.core.workload import Workload


def capacity_chain(gke: GkeSection) -> tuple[str, ...]:
    """The steps to try, in order: each mode of ``gke.capacity``, or with several slices
    and zones each ``mode@zone`` (fallback.attempts_of says why)."""
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
    gke = gke_section(profile)
    chain = tuple(gke.capacity_chain)
    if chain[0] == mode:
        return profile
    # the chain kept, the mode first: the JobSet selects the mode's own pool label, which
    # only a cluster with a chain has (jobs/common.py tpu_pod_scheduling)
    first = [mode, *(m for m in chain if m != mode)]
    return profile.model_copy(update={"gke": gke.model_copy(update={"capacity": first})})


class CapacityRun:
    """One stage's walk along its capacity chain (``steps``, from ``capacity_chain``)."""

    def __init__(self, profile: Profile, *, stage: str, options: GkeOptions,
                 redactor: Redactor, logger: StageLogger) -> None:
        self.profile, self.gke = profile, options.gke
        self.stage, self.options = stage, options
        self.redactor, self.logger = redactor, logger
        self.steps = capacity_chain(self.gke)

    def jobset_for(self, workload: Workload, job: str, step: str) -> Obj:
        """The JobSet of ``job`` as ``step`` (``mode`` or ``mode@zone``) runs it."""
        mode, _, zone = step.partition("@")
        jobset = render_jobset(workload, in_mode(self.profile, mode),
                               run=stage_run(self.profile, job), stage=job, options=self.options)
        return pin_zone(jobset, zone) if zone else jobset

    def step_to_resume(self, workload: Workload, job: str,
                       read: Callable[[str], Obj | None]) -> tuple[int, Obj]:
        """Which step of the chain this run starts in, and its JobSet: the first, unless the
        cluster holds this run's JobSet as a later step rendered it (a flow that died after
        a fallback): a rerun attaches to what trains instead of refusing it as another
        configuration (recovery.on_conflict compares spec digests). One ``read`` of the
        JobSet, and only for a chain of more than one step."""
        first = self.jobset_for(workload, job, self.steps[0])
        if len(self.steps) == 1:
            return 0, first
        live = read(first["metadata"]["name"])
        theirs = ((live or {}).get("metadata", {}).get("annotations") or {}).get(SPEC_DIGEST)
        if theirs is None or live is None or live["metadata"].get("deletionTimestamp"):
            return 0, first
        for index, step in enumerate(self.steps[1:], start=1):
            desired = self.jobset_for(workload, job, step)
            if desired["metadata"]["annotations"][SPEC_DIGEST] == theirs:
                self.logger.info("%s: the JobSet of this run is the one step %s of the "
                                 "capacity chain submitted; attaching to it",
                                 first["metadata"]["name"], step)
                return index, desired
        return 0, first

    def attempt(self, step: str, started: float, monitor: Monitor | None) -> Attempt:
        """What one step's attempt waited and held (its outcome not yet known), from the
        watch's record of when its slice's pods were bound (Monitor.served_at) and where
        (Monitor.served)."""
        end = time.monotonic()
        served = monitor.served if monitor is not None else None
        served_at = monitor.served_at if monitor is not None else None
        bound = served_at if served_at is not None and served_at >= started else None
        held_s = end - bound if bound is not None else 0.0
        chips = self.gke.total_chips if self.stage in ON_SLICE else 0
        mode = step_mode(step)
        price = self.gke.prices.get(mode)  # type: ignore[call-overload]  # a step's mode is one of CapacityMode's
        chip_hours = chips * held_s / 3600
        return Attempt(mode=mode, zone=served.zone if served and bound else "",
                       waited_s=round((bound or end) - started, 3), held_s=round(held_s, 3),
                       chip_hours=round(chip_hours, 6),
                       usd=round(chip_hours * price.usd_per_chip_hour, 4) if price else 0.0)

    def emit_fallback(self, from_step: str, to_step: str, reason: str, code: str,
                      attempts: list[Attempt]) -> None:
        """Best effort: an event that cannot be sent must not fail the stage."""
        profile, stage = self.profile.name, self.stage
        payload = {"from_mode": from_step, "to_mode": to_step,
                   "reason": self.redactor(reason), "code": code,
                   "attempts": [dataclasses.asdict(a) for a in attempts]}
        checked = CAPACITY_FALLBACK.checked(payload)  # a key drifting is our bug: not swallowed
        try:
            emit_event(event=CAPACITY_FALLBACK.name, resource={
                "prefect.resource.id": f"tpurl.stage.{profile}.{stage}",
                "prefect.resource.name": f"{profile} · {stage}",
                "tpurl.profile": profile, "tpurl.stage": stage},
                payload=checked)
        except Exception as exc:  # the stage goes on without its event
            self.logger.warning("could not emit %s: %s", CAPACITY_FALLBACK.name,
                                self.redactor(str(exc)[:200]))
