"""The GKE backend: a Workload becomes one JobSet on the cluster, watched to its verdict.

Built per stage, like LocalBackend, and implementing the same Backend protocol
(``run_workload(workload, log_uri) -> WorkloadRun``). What it guarantees:
- the HF token reaches the cluster only as a Secret (created or updated here, from the
  profile's reference), and its value is registered with the Redactor before anything runs;
- one JobSet per run and stage: create, and on 409 attach to the existing one when it carries
  the same spec digest (a rerun after the flow process died), refuse when it runs another
  configuration, and resubmit when the same configuration already failed (a retry); these
  decisions are the pure functions of recovery.py, this class only makes the calls;
- the verdict comes from object state (``diagnose``), never from a broken stream;
- what follows a verdict (finish, wait for IAM propagation, resubmit after a preemption, fall
  back to the next capacity step, fail) is ``next_action`` (pure), asked once per verdict;
- a Kueue eviction keeps the JobSet: Kueue re-queues the same Workload and re-admits it, so
  the queue position is kept; only a JobSet that itself failed of preemption (a disrupted
  host) is deleted and resubmitted (same run name, so train_rl resumes from its newest
  checkpoints/actor/<step>). Each JobSet carries its submission number (annotation
  ``tpurl/submission``), read back on attach, so at most ``Budgets.preemptions + 1`` JobSets
  are created for a stage across Prefect's retries and flow restarts (one more per fallback
  and per IAM wait); the count is returned as ``WorkloadRun.submissions``. Anything else
  raises StageFailed with the diagnosis, and Prefect's retry condition (retry_if_retryable)
  decides on it;
- every API call rides out infrastructure faults (5xx, 429, resets) with backoff, honouring
  Retry-After, for up to ``Budgets.api_s`` but never past the queue budget, logging each
  retry once with its reason (JobSetClient.call);
- cancelling (KeyboardInterrupt, Prefect's TerminationSignal, any exception) deletes the
  JobSet, so nothing keeps holding the slice; the shared Secret stays for other runs.

GkeBackend is put together from parts, each with its own module: the JobSet client
(``jobsets``, jobset_client.py), the capacity chain (``capacity``, capacity_run.py), the plan
(``planning``, planning.py) and the prices (``pricing``, infra/cost.py).
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from flows.backends.gke import recovery
from flows.backends.gke.capacity_run import CapacityRun, step_mode
from flows.backends.gke.fallback import Attempt
from flows.backends.gke.flow_pools import flow_account_id
from flows.backends.gke.gcs import GcsStorage
from flows.backends.gke.iam_propagation import Grant, grants_path, load
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
from flows.backends.gke.jobset_client import JobSetClient
from flows.backends.gke.next_action import (
    Fail,
    FallBack,
    Finish,
    Resubmit,
    RunState,
    Submissions,
    WaitForIam,
    next_action,
)
from flows.backends.gke.planning import GkePlanning
from flows.backends.gke.runtime import GkeRuntime
from flows.backends.gke.timing import stage_timeout_s
from flows.backends.gke.watch.client import Cluster, connect, kueue_version
from flows.backends.gke.watch.health import HealthWatch
from flows.backends.gke.watch.logs import LogSink
from flows.backends.gke.watch.monitor import Monitor, is_finished
from flows.backends.gke.watch.monitor_verdicts import DELETED_BY_OPERATOR
from flows.backends.gke.watch.node_charges import scale_up_triggered_at, watch_run_nodes
from flows.backends.gke.watch.spend import SpendMeter, meter_for
from flows.backends.gke.watch.stream import WatchSettings
from flows.backends.gke.watch.tpu_nodes import NodeWatch
from flows.backends.gke.watch.verdict import Phase, Verdict
from flows.backends.gke.watch.vm_created import InstanceGet
from flows.common.api_objects import Obj, condition
from flows.common.issues import Issue
from flows.config.gke_section import gke_section
from flows.config.profile import Profile
from flows.core.backend import ProgressCallback, StageLogger, WorkloadRun
from flows.core.budgets import Budgets, budgets_for, waits_for_capacity
from flows.core.failures import Diagnosis, FailureCategory, StageFailed
from flows.core.layout import Layout
from flows.core.manifest import LOGS_DIR
from flows.core.secrets import Redactor
from flows.core.storage import Storage
from flows.core.team_origin import TeamAndOrigin
from flows.core.workload import Workload


@dataclass
class StageRun:
    """What one ``run_workload`` call has done so far, for its report and its decisions."""

    step: int  # the index of the capacity step being run
    desired: Obj  # the JobSet of that step
    submission: int = 0  # the number of the JobSet being watched
    owned: bool = False  # this run submitted or attached to the JobSet
    attempts: list[Attempt] = field(default_factory=list)
    preemptions: int = 0
    preempted_s: float = 0.0  # held by the preempted attempts
    submissions: Submissions = field(default_factory=lambda: Submissions(0))  # the bound

    @property
    def name(self) -> str:
        return str(self.desired["metadata"]["name"])


class GkeBackend:
    """The Backend protocol on GKE: this class runs workloads; GkeImage and GkeInfra do the
    image and infra steps, GkePlanning plans and GkePricing prices."""

    name = "gke"

    def __init__(self, profile: Profile, *, logger: StageLogger | None = None,
                 redactor: Redactor | None = None, on_progress: ProgressCallback | None = None,
                 stage: str = "", team_origin: TeamAndOrigin | None = None,
                 storage: Storage | None = None, cluster: Cluster | None = None,
                 budgets: Budgets | None = None,
                 watch_settings: WatchSettings | None = None, api_attempts: int = 0,
                 api_backoff_s: float = 1.0, log_read_timeout_s: float = 300.0,
                 instances: InstanceGet | None = None) -> None:
        self.profile, self.gke, self.layout = profile, gke_section(profile), Layout(profile)
        self._storage = storage
        self.options = options_for(profile, team_origin)
        self.watch_settings = watch_settings or WatchSettings()
        self.log_read_timeout_s = log_read_timeout_s
        self._cluster = cluster
        self._instances = instances  # Compute Engine's instances.get (None: the real API)
        self._api_attempts, self._api_backoff_s = api_attempts, api_backoff_s
        self.runtime = GkeRuntime(profile)
        self.planning = GkePlanning(profile, self.options, self.runtime)
        self.pricing = GkePricing(profile, self.gke)
        self._bind(stage, logger, redactor, on_progress, budgets)

    def for_stage(self, stage: str, *, logger: StageLogger, redactor: Redactor,
                  on_progress: ProgressCallback | None) -> GkeBackend:
        """This run's backend bound to one stage and its task's logger: the profile's parts
        (options, runtime, prices) are the run's; what a stage counts and watches is its own."""
        bound = copy.copy(self)
        bound._bind(stage, logger, redactor, on_progress, None)
        return bound

    def _bind(self, stage: str, logger: StageLogger | None, redactor: Redactor | None,
              on_progress: ProgressCallback | None, budgets: Budgets | None) -> None:
        self.logger: StageLogger = logger or logging.getLogger("tpurl")
        self.redactor = redactor or Redactor()
        self.on_progress, self.stage = on_progress, stage
        self.budgets = budgets or budgets_for(self.profile, stage)
        self.jobsets = JobSetClient(
            lambda: self.cluster, namespace=self.gke.namespace, project=self.gke.project,
            stage=stage, budgets=self.budgets, redactor=self.redactor, logger=self.logger,
            hf_token_key=self.options.hf_token_key, secret_owner=self.options.secret_owner,
            api_attempts=self._api_attempts,
            api_backoff_s=self._api_backoff_s)
        self.capacity = CapacityRun(self.profile, stage=stage, options=self.options,
                                    redactor=self.redactor, logger=self.logger)
        self.submitted: list[str] = []  # JobSets created by this backend (a create that returned)
        self.monitor: Monitor | None = None  # the latest one, for the benchmark and tests
        # the watch of the run's TPU nodes after the stage, until they are gone (for tests)
        self.node_tail: threading.Thread | None = None
        self.spend: SpendMeter | None = meter_for(self.profile, stage)  # None: no cap set
        self.health: HealthWatch | None = None  # the training sentinel, while train runs
        self.image = GkeImage(self)
        self.infra = GkeInfra(self)

    @property
    def storage(self) -> Storage:
        """The bucket, reached on first use: a plan builds a backend and reads nothing."""
        if self._storage is None:
            self._storage = GcsStorage()
        return self._storage

    @property
    def cluster(self) -> Cluster:
        """Connected on first use: a stage whose output is already there talks to nobody."""
        if self._cluster is None:
            self._cluster = connect(self.profile)
            self.logger.info("cluster reached through %s", self._cluster.how)
        return self._cluster

    def clear_leftovers(self, stage: str, directory: str) -> int:
        """Keep the directory for a JobSet of this stage's run that still exists: the run
        reattaches to it (a rerun after the flow process died) and it writes there."""
        for job in jobs_of(stage) if stage in GKE_STAGES else ():
            selector = (f"{STAGE_LABEL}={label_value(job)},"
                        f"{RUN_LABEL}={label_value(stage_run(self.profile, job))}")
            if self.jobsets.list(job, selector):
                self.logger.info("%s: a JobSet of this run exists; its output directory %s is "
                                 "kept for it", job, directory)
                return 0
        return self.storage.remove_tree(directory, keep=(LOGS_DIR,))

    # --- Timing, Pricing and Planning, answered by their parts -----------------------------
    def stage_timeout_s(self, stage: str) -> float:
        return stage_timeout_s(self.profile, stage)

    @property
    def usd_per_chip_hour(self) -> float:
        return self.pricing.usd_per_chip_hour

    def estimated_chip_hours(self, stage: str) -> float:
        return self.pricing.estimated_chip_hours(stage)

    def held_chip_hours(self, stage: str, wall_s: float) -> float:
        return self.pricing.held_chip_hours(stage, wall_s)

    def plan_header(self) -> list[str]:
        return self.planning.plan_header()

    def plan_footer(self) -> list[str]:
        return self.planning.plan_footer()

    def write_plan_files(self, out_dir: Path, workloads: Mapping[str, Workload]) -> list[Path]:
        return self.planning.write_plan_files(out_dir, workloads)

    def preflight(self) -> tuple[str, bool]:
        return self.planning.preflight()

    def validation_warnings(self) -> list[str]:
        return self.planning.validation_warnings()

    def start_issues(self) -> list[Issue]:
        return self.planning.start_issues()

    def run_workload(self, workload: Workload, log_uri: str) -> WorkloadRun:
        """Submit the workload's JobSet (or attach to this run's), watch it to a verdict, and
        do what ``next_action`` says, until the JobSet succeeds or the stage fails."""
        started = time.monotonic()
        job = job_of(self.stage, workload.name)
        run = self._resumed_run(workload, job)
        sink = LogSink(workload.name, self.logger, self.redactor, self.storage, log_uri,
                       self._progress(workload), workload.progress_regex)
        coordinator = HEAD if workload.placement.kind == "pathways" else MAIN_JOB
        nodes: NodeWatch | None = None  # the run's TPU nodes, charged while they live
        if self.stage == "train" and self.health is None:
            self.health = self._health_watch(workload)
        try:
            nodes = watch_run_nodes(self.spend, self.profile, self.cluster, self.watch_settings,
                                    lambda line: self.logger.warning("%s", line),
                                    flow_account_id(self.options.team), self._instances)
            self.jobsets.apply_secrets(workload)
            self.jobsets.ship_programs(workload)
            while True:
                live, run.submission = self._create_or_attach(run, sink)
                run.owned = True
                attempt_started = time.monotonic()
                verdict = self._watch(live, sink, coordinator)
                self._note_failure(run, verdict, attempt_started)
                state = self._state(run, verdict, workload, started, attempt_started)
                action = next_action(verdict, state)
                run.attempts.append(replace(state.attempt, outcome=action.outcome))
                match action:
                    case Finish():
                        break
                    case WaitForIam(line=line, wait_s=wait_s):
                        sink.note(line)
                        self.logger.warning("%s: %s", run.name, line)
                        self.jobsets.delete(run.name, wait=True)
                        time.sleep(wait_s)
                        run.submissions = run.submissions.after_iam_wait()
                    case Resubmit(note=note, line=line):
                        sink.note(note)
                        self.logger.warning("%s", line)
                        self.jobsets.delete(run.name, wait=True)
                    case FallBack():
                        self._fall_back(run, action, sink, workload, job)
                    case Fail(diagnosis=diagnosis):
                        self._give_up(run.name, diagnosis)
                        raise StageFailed(self.stage or workload.name,
                                          self._redacted(diagnosis, job), log_uri)
        except StageFailed:
            raise
        except BaseException:
            if run.owned:
                self.logger.warning("%s: interrupted; deleting the JobSet so it holds no chips",
                                    run.name)
                self.jobsets.cancel(run.name)
            raise
        finally:
            sink.save()
            self._charge_the_tail(nodes, run.name)
        return self._report(workload, run, time.monotonic() - started, log_uri)

    def _health_watch(self, workload: Workload) -> HealthWatch:
        """The training sentinel over this training's event files (watch/health.py)."""
        from prefect.runtime import flow_run

        usd = self.estimated_chip_hours("train") * self.usd_per_chip_hour
        return HealthWatch(self.profile, self.storage, Layout(self.profile).train_run_dir,
                           flow_run.name or "run", workload.total_steps, usd,
                           lambda line: self.logger.warning("%s", line))

    def _resumed_run(self, workload: Workload, job: str) -> StageRun:
        """The step this run starts in: a later one when the cluster holds this run's JobSet
        as that step rendered it (capacity_run.py step_to_resume)."""
        step, desired = self.capacity.step_to_resume(workload, job, self.jobsets.get)
        submissions = Submissions(self.budgets.preemptions)
        if step:
            submissions = submissions.after_fallback(step)
            self._enter_step(step)
        return StageRun(step=step, desired=desired, submissions=submissions)

    def _note_failure(self, run: StageRun, verdict: Verdict, attempt_started: float) -> None:
        """A failure is logged; a preemption is counted with the time its attempt held the
        slice, whatever follows it (the run's report says what preemptions cost)."""
        if verdict.diagnosis is None:
            return
        self.logger.warning("%s: %s", run.name, verdict.diagnosis.summary)
        if verdict.diagnosis.category is FailureCategory.PREEMPTED:
            run.preemptions += 1
            run.preempted_s += time.monotonic() - attempt_started

    def _state(self, run: StageRun, verdict: Verdict, workload: Workload, started: float,
               attempt_started: float) -> RunState:
        """What ``next_action`` decides on: the run so far, this attempt as measured, and
        for a failure the infra stage's grants (a success needs none read)."""
        return RunState(
            name=run.name, namespace=self.gke.namespace, stage=self.stage or workload.name,
            steps=self.capacity.steps, index=run.step, submission=run.submission,
            submissions=run.submissions, waited_s=time.monotonic() - started,
            queue_budget_s=self.budgets.queue_s, attempts=tuple(run.attempts),
            attempt=self.capacity.attempt(self.capacity.steps[run.step], attempt_started,
                                          self.monitor),
            grants=self._recorded_grants() if verdict.diagnosis is not None else (),
            now=time.time(),
            iam_budget_s=self.budgets.iam_propagation_s)

    def _fall_back(self, run: StageRun, action: FallBack, sink: LogSink, workload: Workload,
                   job: str) -> None:
        """Say so, delete the spent step's JobSet and see it gone (never two JobSets of one
        stage at once), then make the next step's JobSet the one to submit."""
        steps = self.capacity.steps
        sink.note(action.note)
        self.logger.warning("%s", action.note)
        self.capacity.emit_fallback(steps[run.step], steps[action.index], action.reason.summary,
                                    action.reason.code, run.attempts)
        self.jobsets.delete(run.name, wait=True)
        run.submissions = run.submissions.after_fallback()
        run.step = action.index
        run.desired = self.capacity.jobset_for(workload, job, steps[run.step])
        self._enter_step(run.step)

    def _give_up(self, name: str, diagnosis: Diagnosis) -> None:
        """A queued or stuck JobSet is deleted: it must stop holding quota, and one whose
        Workload was deactivated must not run unwatched if reactivated. Never one someone
        else deleted (they may have recreated it under the name)."""
        if diagnosis.code != DELETED_BY_OPERATOR and \
                not is_finished(self.monitor.last_jobset if self.monitor else None):
            self.jobsets.cancel(name)

    def _charge_the_tail(self, nodes: NodeWatch | None, name: str) -> None:
        """The nodes' scale-down tail is billed after the pods: the meter is paused, and the
        run's nodes are charged until they are gone (``node_tail``)."""
        if self.spend is None:
            return
        self.spend.pause()
        if nodes is not None:
            triggered = scale_up_triggered_at(
                self.monitor.scaling_events_seen() if self.monitor else [], name)
            self.node_tail = nodes.linger(self.spend.tail_s, self.budgets.tick_s, triggered)

    def _report(self, workload: Workload, run: StageRun, wall: float, log_uri: str
                ) -> WorkloadRun:
        self.logger.info("%s: %s completed in %.1f s after %d submission(s) (log: %s)",
                         workload.name, run.name, wall, run.submission, log_uri)
        if len(self.capacity.steps) > 1:
            self.logger.info("%s: capacity: %s", workload.name,
                             "; ".join(a.line() for a in run.attempts))
        return WorkloadRun(
            name=workload.name, wall_s=wall, log_uri=log_uri, submissions=run.submission,
            preemptions=run.preemptions, preempted_chip_hours=round(
                self.held_chip_hours(self.stage or workload.name, run.preempted_s), 4),
            capacity=[dataclasses.asdict(a) for a in run.attempts])

    def _recorded_grants(self) -> tuple[Grant, ...]:
        """What the infra stage granted and when (iam_propagation.py)."""
        return tuple(load(grants_path(settings_from_profile(self.profile).workdir)))

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

    def _enter_step(self, index: int) -> None:
        """A later step of the capacity chain: its mode's price on the meter, its mode's wait
        for capacity in the budgets."""
        mode, last = step_mode(self.capacity.steps[index]), index + 1 == len(self.capacity.steps)
        if self.spend is not None and not self.spend.static_pool:
            # the next mode bills at its own price (a node by its pool's label; a chain's
            # reservation keeps its static pool's price: it bills on meanwhile)
            self.spend.usd_per_chip_hour = self.gke.mode_usd_per_chip_hour(mode)
        self.budgets = dataclasses.replace(
            self.budgets, waits_for_capacity=waits_for_capacity(mode, self.stage, last))

    def _create_or_attach(self, run: StageRun, sink: LogSink) -> tuple[Obj, int]:
        """The JobSet to watch and its submission number: created as ``previous + 1``, or an
        existing one of the same spec attached to, or a failed one of an earlier attempt
        replaced (its number read from its annotation, so the bound holds across retries)."""
        desired, previous = run.desired, run.submission
        name, ns = desired["metadata"]["name"], self.gke.namespace
        digest = desired["metadata"]["annotations"][SPEC_DIGEST]
        preemptions = run.submissions.resubmissions
        for _ in range(5):
            decision = recovery.before_create(name, previous, preemptions, ns)
            if decision.diagnosis is not None:
                raise StageFailed(self.stage, decision.diagnosis)
            number = decision.number
            created = self.jobsets.create(recovery.numbered(desired, number))
            if created is not None:
                self.submitted.append(name)
                self.logger.info("submitted JobSet %s (spec %s, submission %d of at most %d)",
                                 name, digest, number, run.submissions.most)
                return created, number
            live = self.jobsets.get(name)
            decision = recovery.on_conflict(live, desired, previous, preemptions, ns)
            if decision.diagnosis is not None:
                raise StageFailed(self.stage, decision.diagnosis)
            if decision.action is recovery.Action.WAIT_GONE:
                self.jobsets.wait_gone(name)
            previous = decision.number
            if decision.action is recovery.Action.RESUBMIT:
                self.logger.warning("JobSet %s of an earlier attempt failed; resubmitting", name)
                sink.note(f"an earlier attempt of {name} had failed; resubmitted")
                self.jobsets.delete(name, wait=True)
            if decision.action is not recovery.Action.ATTACH or live is None:
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
        version = self.jobsets.call("discover the served Kueue API version", kueue_version,
                                    self.cluster)
        self.monitor = Monitor(self.cluster, live, sink, self.logger, self.budgets,
                               self.watch_settings, coordinator, self.log_read_timeout_s,
                               spend=self.spend, kueue_version=version,
                               health=self.health.check if self.health else None)
        return self.monitor.run()
