"""The GKE backend: a Workload becomes one JobSet on the cluster, watched to its verdict.

Built per stage, like LocalBackend, and implementing the same Backend protocol
(``run_workload(workload, log_uri) -> WorkloadRun``). What it guarantees:
- the HF token reaches the cluster only as a Secret (created or updated here, from the
  profile's reference), and its value is registered with the Redactor before anything runs;
- one JobSet per run and stage: create, and on 409 attach to the existing one when it carries
  the same spec digest (a rerun after the flow process died), refuse when it runs another
  configuration, and resubmit when the same configuration already failed (a retry); these
  decisions are the pure functions of recovery.py, this class only makes the calls;
- the verdict comes from object state (flows/backends/gke/watch/verdict.py), never from a broken stream;
- a Kueue eviction keeps the JobSet: Kueue re-queues the same Workload and re-admits it, so
  the queue position is kept; only a JobSet that itself failed of preemption (a disrupted
  host) is deleted and resubmitted (same run name, so train_rl resumes from its newest
  checkpoints/actor/<step>). Each JobSet carries its submission number (annotation
  ``tpurl/submission``), read back on attach, so at most ``Budgets.preemptions + 1`` JobSets
  are created for a stage across Prefect's retries and flow restarts; the count is returned
  as ``WorkloadRun.submissions``. Anything else raises StageFailed with the diagnosis, and
  Prefect's retry condition decides on it (pipeline.py);
- every API call rides out infrastructure faults (5xx, 429, resets) with backoff, honouring
  Retry-After, for up to ``Budgets.api_s`` but never past the queue budget, logging each
  retry once with its reason;
- cancelling (KeyboardInterrupt, Prefect's TerminationSignal, any exception) deletes the
  JobSet, so nothing keeps holding the slice; the shared Secret stays for other runs.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from kubernetes.client.exceptions import ApiException

from flows.backends.gke import iam_propagation, recovery
from flows.backends.gke.capacity_run import CapacityRun, capacity_chain, step_mode
from flows.backends.gke.fallback import Attempt, chain_spent, fallback_note, falls_back
from flows.backends.gke.gcs import GcsStorage
from flows.backends.gke.image.stage_work import GkeImage
from flows.backends.gke.infra.cost import GkePricing
from flows.backends.gke.infra.settings import settings_from_profile
from flows.backends.gke.infra.stage_work import GkeInfra
from flows.backends.gke.jobs.common import RUN_LABEL, SPEC_DIGEST, STAGE_LABEL
from flows.backends.gke.jobs.manifests import GKE_STAGES, job_of, jobs_of, stage_run
from flows.backends.gke.jobs.naming import label_value
from flows.backends.gke.jobs.options import options_for
from flows.backends.gke.jobs.pathways import HEAD
from flows.backends.gke.jobs.render import MAIN_JOB
from flows.backends.gke.jobset_calls import JobSetCalls
from flows.backends.gke.planning import GkePlanning
from flows.backends.gke.recovery import Action
from flows.backends.gke.runtime import GkeRuntime
from flows.backends.gke.timing import GkeTiming
from flows.backends.gke.watch.client import (
    JOBSET_GROUP,
    JOBSET_VERSION,
    JOBSETS,
    Cluster,
    api_reason,
    connect,
    kueue_version,
    short_error,
)
from flows.backends.gke.watch.logs import LogSink
from flows.backends.gke.watch.monitor import Monitor, is_finished
from flows.backends.gke.watch.monitor_verdicts import DELETED_BY_OPERATOR
from flows.backends.gke.watch.node_charges import scale_up_triggered_at, watch_run_nodes
from flows.backends.gke.watch.spend import SpendMeter, meter_for
from flows.backends.gke.watch.stream import WatchSettings
from flows.backends.gke.watch.tpu_nodes import NodeWatch
from flows.backends.gke.watch.verdict import Phase, Verdict, condition
from flows.common.api_objects import Obj
from flows.config.gke import GkeSection
from flows.config.profile import Profile
from flows.core.backend import ProgressCallback, StageLogger, WorkloadRun
from flows.core.budgets import Budgets, budgets_for, waits_for_capacity
from flows.core.failures import Diagnosis, FailureCategory, StageFailed
from flows.core.layout import Layout
from flows.core.manifest import LOGS_DIR
from flows.core.retry import RetryPolicy, call_within, is_infrastructure_fault
from flows.core.secrets import Redactor
from flows.core.storage import Storage
from flows.core.workload import Workload


class GkeBackend(GkePlanning, GkePricing, GkeTiming, CapacityRun, JobSetCalls):
    """The Backend protocol (flows/core/backend.py) on GKE; this class runs workloads, the
    image and infra steps live in image/stage_work.py and infra/stage_work.py, plans in planning.py and
    prices in infra/cost.py (GkePricing)."""

    name = "gke"

    def __init__(self, profile: Profile, *, logger: StageLogger | None = None,
                 redactor: Redactor | None = None, on_progress: ProgressCallback | None = None,
                 stage: str = "", storage: Storage | None = None,
                 cluster: Cluster | None = None, budgets: Budgets | None = None,
                 watch_settings: WatchSettings | None = None, api_attempts: int = 0,
                 api_backoff_s: float = 1.0, log_read_timeout_s: float = 300.0) -> None:
        assert profile.gke is not None
        self.gke: GkeSection = profile.gke  # the section its calls read (namespace, prices)
        self.profile, self.layout = profile, Layout(profile)
        self.logger: StageLogger = logger or logging.getLogger("tpurl")
        self.redactor = redactor or Redactor()
        self.on_progress, self.stage = on_progress, stage
        self._storage = storage
        self.options = options_for(profile)
        self.budgets = budgets or budgets_for(profile, stage)
        self.watch_settings = watch_settings or WatchSettings()
        # api_attempts caps the attempts of one call (0: only the time budget bounds them)
        self.api_attempts, self.api_backoff_s = api_attempts, api_backoff_s
        self.log_read_timeout_s = log_read_timeout_s
        self._cluster = cluster
        self.submitted: list[str] = []  # JobSets created by this backend (a create that returned)
        self.fallbacks = 0  # to the next mode of gke.capacity, in this stage
        self.iam_waits = 0  # resubmissions that waited for IAM propagation, in this stage
        self.monitor: Monitor | None = None  # the latest one, for the benchmark and tests
        # the watch of the run's TPU nodes after the stage, until they are gone (for tests)
        self.node_tail: threading.Thread | None = None
        self.spend: SpendMeter | None = meter_for(profile, stage)  # None: no cap set
        self.image = GkeImage(self)
        self.infra = GkeInfra(self)
        self.runtime = GkeRuntime(profile)

    @property
    def storage(self) -> Storage:
        """The bucket, reached on first use: a plan builds a backend and reads nothing."""
        if self._storage is None:
            self._storage = GcsStorage()
        return self._storage

    def clear_leftovers(self, stage: str, directory: str) -> int:
        """Keep the directory for a JobSet of this stage's run that still exists: the run
        reattaches to it (a rerun after the flow process died) and it writes there."""
        for job in jobs_of(stage) if stage in GKE_STAGES else ():
            selector = (f"{STAGE_LABEL}={label_value(job)},"
                        f"{RUN_LABEL}={label_value(stage_run(self.profile, job))}")
            try:
                found = self._call(f"list JobSets of {job}",
                                   self.cluster.custom.list_namespaced_custom_object,
                                   JOBSET_GROUP, JOBSET_VERSION, self.gke.namespace,
                                   JOBSETS, label_selector=selector)
            except ApiException as exc:  # a 403 names the grant (watch/forbidden.py)
                raise self._api_failure(f"list JobSets of {job}", exc) from None
            if found.get("items"):
                self.logger.info("%s: a JobSet of this run exists; its output directory %s is "
                                 "kept for it", job, directory)
                return 0
        return self.storage.remove_tree(directory, keep=(LOGS_DIR,))

    @property
    def cluster(self) -> Cluster:
        """Connected on first use: a stage whose output is already there talks to nobody."""
        if self._cluster is None:
            self._cluster = connect(self.profile)
            self.logger.info("cluster reached through %s", self._cluster.how)
        return self._cluster

    # --- the protocol ----------------------------------------------------------------------
    def run_workload(self, workload: Workload, log_uri: str) -> WorkloadRun:
        started = time.monotonic()
        job = job_of(self.stage, workload.name)
        chain = capacity_chain(self.profile)
        index, desired = self._step_to_resume(workload, job, chain)
        if index:
            self._enter_step(chain, index)
        name, ns = desired["metadata"]["name"], self.gke.namespace
        attempts: list[Attempt] = []
        sink = LogSink(workload.name, self.logger, self.redactor, self.storage, log_uri,
                       self._progress(workload), workload.progress_regex)
        coordinator = HEAD if workload.placement.kind == "pathways" else MAIN_JOB
        owned = False  # this run submitted or attached to the JobSet
        number = 0  # the submission number of the JobSet being watched
        preempted, preempted_s = 0, 0.0
        nodes: NodeWatch | None = None  # the run's TPU nodes, charged while they live
        try:
            nodes = watch_run_nodes(self.spend, self.profile, self.cluster, self.watch_settings,
                                    lambda line: self.logger.warning("%s", line))
            self._apply_secrets(workload)
            self._ship_programs(workload)
            while True:
                live, number = self._create_or_attach(desired, sink, number)
                owned = True
                attempt_started = time.monotonic()
                verdict = self._watch(live, sink, coordinator)
                if verdict.phase is Phase.SUCCEEDED:
                    attempts.append(self._attempt(chain[index], attempt_started, "succeeded"))
                    break
                assert verdict.diagnosis is not None
                self.logger.warning("%s: %s", name, verdict.diagnosis.summary)
                if (lag := self._iam_lag(verdict.diagnosis)) is not None and lag.line:
                    attempts.append(self._attempt(chain[index], attempt_started,
                                                  "iam-propagation"))
                    sink.note(lag.line)
                    self.logger.warning("%s: %s", name, lag.line)
                    self._delete(name, wait=True)
                    time.sleep(lag.wait_s)
                    self.iam_waits += 1
                    continue
                if lag is not None and lag.diagnosis is not None:
                    verdict = replace(verdict, diagnosis=lag.diagnosis)
                assert verdict.diagnosis is not None
                if verdict.diagnosis.category is FailureCategory.PREEMPTED:
                    preempted += 1
                    preempted_s += time.monotonic() - attempt_started
                decision = recovery.after_verdict(verdict.diagnosis, name, number,
                                                  self.budgets.preemptions + self.extra, ns)
                waited = time.monotonic() - started
                nxt = falls_back(verdict.diagnosis, chain, index, waited, self.budgets.queue_s)
                if decision.action is not Action.RESUBMIT and nxt is not None:
                    attempts.append(self._attempt(chain[index], attempt_started, "no-capacity"))
                    note = fallback_note(self.stage or workload.name, chain, index,
                                         verdict.diagnosis)
                    sink.note(note)
                    self.logger.warning("%s", note)
                    self._emit_fallback(chain[index], chain[nxt], verdict.diagnosis.summary,
                                        verdict.diagnosis.code, attempts)
                    self._delete(name, wait=True)  # never two JobSets of one stage at once
                    self.fallbacks += 1
                    index = nxt
                    desired = self._jobset_for(workload, job, chain[index])
                    self._enter_step(chain, index)
                    continue
                if decision.action is Action.RESUBMIT:
                    attempts.append(self._attempt(chain[index], attempt_started, "preempted"))
                    sink.note(f"preempted; resubmitting {name} ({number + 1}/"
                              f"{self.max_submissions}), resuming from the newest checkpoint")
                    self.logger.warning("%s preempted: resubmitting (submission %d of at most "
                                        "%d); the program resumes from its newest checkpoint",
                                        name, number + 1, self.max_submissions)
                    self._delete(name, wait=True)
                    continue
                assert decision.diagnosis is not None
                attempts.append(self._attempt(chain[index], attempt_started, "failed"))
                decision = replace(decision, diagnosis=chain_spent(
                    decision.diagnosis, chain, attempts, self.budgets.queue_s, waited))
                assert decision.diagnosis is not None
                if decision.diagnosis.code != DELETED_BY_OPERATOR and \
                        not is_finished(self.monitor.last_jobset if self.monitor else None):
                    self._cancel(name)  # queued or stuck: stop holding quota, and a JobSet
                    # whose Workload was deactivated must not run unwatched if reactivated
                    # (never one someone else deleted and may have recreated under the name)
                raise StageFailed(self.stage or workload.name, self._redacted(decision.diagnosis, job),
                                  log_uri)
        except StageFailed:
            raise
        except BaseException:
            if owned:
                self.logger.warning("%s: interrupted; deleting the JobSet so it holds no chips",
                                    name)
                self._cancel(name)
            raise
        finally:
            sink.save()
            if self.spend is not None:  # the nodes' scale-down tail, billed after the pods
                self.spend.pause()
            if nodes is not None and self.spend is not None:  # charged until they are gone
                triggered = scale_up_triggered_at(
                    self.monitor.scaling_events_seen() if self.monitor else [], name)
                self.node_tail = nodes.linger(self.spend.tail_s, self.budgets.tick_s,
                                              triggered)
        wall = time.monotonic() - started
        self.logger.info("%s: %s completed in %.1f s after %d submission(s) (log: %s)",
                         workload.name, name, wall, number, log_uri)
        if len(chain) > 1:
            self.logger.info("%s: capacity: %s", workload.name,
                             "; ".join(a.line() for a in attempts))
        return WorkloadRun(name=workload.name, wall_s=wall, log_uri=log_uri, submissions=number,
                           preemptions=preempted, preempted_chip_hours=round(
                               self.held_chip_hours(self.stage or workload.name, preempted_s), 4),
                           capacity=[dataclasses.asdict(a) for a in attempts])

    @property
    def max_submissions(self) -> int:
        """JobSets ever created for one stage of one run, across retries and restarts: one,
        one more per preemption, per fallback to the next capacity mode and per wait for IAM
        propagation."""
        return self.budgets.preemptions + 1 + self.extra

    @property
    def extra(self) -> int:
        """Submissions beyond the preemption budget: fallbacks and IAM propagation waits."""
        return self.fallbacks + self.iam_waits

    def _iam_lag(self, diagnosis: Diagnosis) -> iam_propagation.Outcome | None:
        """A 403 on a grant the infra stage just made (iam_propagation.py)."""
        path = iam_propagation.grants_path(settings_from_profile(self.profile).workdir)
        return iam_propagation.after_failure(diagnosis, iam_propagation.load(path),
                                             time.time(), self.budgets.iam_propagation_s)

    # --- pieces ----------------------------------------------------------------------------
    def _progress(self, workload: Workload) -> Callable[[str], None] | None:
        if not (workload.progress_regex and self.on_progress):
            return None
        pattern, report = re.compile(workload.progress_regex), self.on_progress

        def progress(line: str) -> None:
            if m := pattern.search(line):
                report(workload.name, int(m.group("step")), workload.total_steps)
        return progress

    def _redacted(self, diagnosis: Diagnosis, job: str) -> Diagnosis:
        """Redacted, and naming the one command that collects what a report needs."""
        run = stage_run(self.profile, job) if self.stage in GKE_STAGES else ""
        bundle = (f"; for a report: tpurl support-bundle {self.profile.name}"
                  + (f" --run {label_value(run)}" if run else ""))
        return replace(diagnosis, summary=self.redactor(diagnosis.summary),
                       detail=self.redactor(diagnosis.detail),
                       fix=diagnosis.fix + bundle)

    def _call(self, what: str, fn: Callable[..., Any], *args: Any,
              within_s: float | None = None, **kwargs: Any) -> Any:
        """One API call, retried with backoff (Retry-After honoured) on 5xx/429/connection
        errors (flows.core.retry) for ``within_s``: by default ``Budgets.api_s`` but never
        longer than the queue budget, so an API that stays down fails the stage within its
        budget. Other errors (404, 409, 422) are the caller's to interpret."""
        budget = within_s if within_s is not None else min(self.budgets.api_s,
                                                          self.budgets.queue_s)
        policy = RetryPolicy(attempts=self.api_attempts, base_s=self.api_backoff_s, max_s=30.0)

        def notice(attempt: int, message: str, wait_s: float) -> None:
            self.logger.warning("API error while trying to %s (%s); retry %d in %.1f s",
                                what, self.redactor(message), attempt, wait_s)

        try:
            return call_within(lambda: fn(*args, **kwargs), policy, time.monotonic() + budget,
                               notice, text=api_reason)
        except Exception as exc:
            if not is_infrastructure_fault(exc):
                raise
            raise StageFailed(self.stage, Diagnosis(
                FailureCategory.INFRASTRUCTURE,
                f"the Kubernetes API kept failing while trying to {what} ({short_error(exc)})",
                f"    {self.redactor(api_reason(exc))}",
                f"the control plane is unavailable or overloaded; retried with backoff for "
                f"up to {budget:.0f} s"),
            ) from None

    def _enter_step(self, chain: tuple[str, ...], index: int) -> None:
        """A later step of the capacity chain: its mode's price on the meter, its mode's wait
        for capacity in the budgets."""
        if self.spend is not None and not self.spend.static_pool:
            # the next mode bills at its own price (a node by its pool's label; a chain's
            # reservation keeps its static pool's price: it bills on meanwhile)
            self.spend.usd_per_chip_hour = self.gke.mode_usd_per_chip_hour(
                step_mode(chain[index]))
        self.budgets = dataclasses.replace(self.budgets, waits_for_capacity=(
            waits_for_capacity(step_mode(chain[index]), self.stage, index + 1 == len(chain))))

    def _get(self, name: str) -> Obj | None:
        try:
            return self._call(f"read JobSet {name}", self.cluster.custom.get_namespaced_custom_object,
                              JOBSET_GROUP, JOBSET_VERSION, self.gke.namespace, JOBSETS, name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise self._api_failure(f"read JobSet {name}", exc) from None

    def _create_or_attach(self, desired: Obj, sink: LogSink, previous: int) -> tuple[Obj, int]:
        """The JobSet to watch and its submission number: created as ``previous + 1``, or an
        existing one of the same spec attached to, or a failed one of an earlier attempt
        replaced (its number read from its annotation, so the bound holds across retries)."""
        name, ns = desired["metadata"]["name"], self.gke.namespace
        digest = desired["metadata"]["annotations"][SPEC_DIGEST]
        preemptions = self.budgets.preemptions + self.extra
        for _ in range(5):
            decision = recovery.before_create(name, previous, preemptions, ns)
            if decision.diagnosis is not None:
                raise StageFailed(self.stage, decision.diagnosis)
            number = decision.number
            try:
                live = self._call(f"create JobSet {name}",
                                  self.cluster.custom.create_namespaced_custom_object,
                                  JOBSET_GROUP, JOBSET_VERSION, ns, JOBSETS,
                                  recovery.numbered(desired, number))
                self.submitted.append(name)
                self.logger.info("submitted JobSet %s (spec %s, submission %d of at most %d)",
                                 name, digest, number, self.max_submissions)
                return live, number
            except ApiException as exc:
                if exc.status != 409:
                    raise self._api_failure(f"create JobSet {name}", exc) from None
            live = self._get(name)
            decision = recovery.on_conflict(live, desired, previous, preemptions, ns)
            if decision.diagnosis is not None:
                raise StageFailed(self.stage, decision.diagnosis)
            if decision.action is Action.WAIT_GONE:
                self._wait_gone(name)
            previous = decision.number
            if decision.action is Action.RESUBMIT:
                self.logger.warning("JobSet %s of an earlier attempt failed; resubmitting", name)
                sink.note(f"an earlier attempt of {name} had failed; resubmitted")
                self._delete(name, wait=True)
            if decision.action is not Action.ATTACH or live is None:
                continue
            self.logger.info("reattaching to JobSet %s (same spec %s, created earlier)", name,
                             digest)
            sink.note(f"reattached to {name}")
            return live, previous
        raise StageFailed(self.stage, Diagnosis(
            FailureCategory.INFRASTRUCTURE, f"JobSet {name} could neither be created nor found",
            "    409 AlreadyExists, then 404 NotFound, five times", "retried with backoff"))

    def _watch(self, live: Obj, sink: LogSink, coordinator: str) -> Verdict:
        if condition(live, "Completed"):
            self.logger.info("JobSet %s had already completed", live["metadata"]["name"])
            return Verdict(Phase.SUCCEEDED, None, "completed earlier")
        if self.spend is not None:
            self.spend.pause()  # time between submissions is not watched
        version = self._call("discover the served Kueue API version", kueue_version,
                             self.cluster)
        self.monitor = Monitor(self.cluster, live, sink, self.logger, self.budgets,
                               self.watch_settings, coordinator, self.log_read_timeout_s,
                               spend=self.spend, kueue_version=version)
        return self.monitor.run()
