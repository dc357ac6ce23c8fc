"""The run page while the run goes on: the stage table and each stage's outputs as it ends.

On GKE a run lasts hours; a page that fills only at the end hides the checkpoint URIs the
whole time. So the flow tells a ``StagePage`` when each stage starts and how it ends (the
page only shows; running the task, its timeout and a cancel are the flow's): the table (made
once, all stages pending) is updated in place when a stage starts and ends (Prefect's
``PATCH /artifacts/{id}`` also moves the key's latest version, prefect/server/models/
artifacts.py ``update_artifact``), and a stage's outputs are published the moment it
finishes. Publishing is best-effort: a UI nicety never fails a run.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any
from uuid import UUID

from prefect.states import Completed, State

from flows.core.deadline import DeadlinePassed
from flows.core.stage import StageOutput
from flows.run.cancel import cancelled_by_user
from flows.run.result import StageReport
from flows.runpage import quiet_artifacts as quiet
from flows.runpage.artifacts import slug
from flows.runpage.markdown_text import md_code, md_link, md_text

log = logging.getLogger(__name__)

# Per stage: the outputs a reader opens (artifact name, key in the stage's uris). Only the
# export's link is keyed, as "the latest model of this deployment" on the Artifacts page; the
# checkpoints' links are this run's own (unkeyed): each keyed artifact created costs a
# prefect.artifact-collection event in the run's feed (quiet_artifacts.py).
KEYED_OUTPUTS = frozenset({"hf_export"})
OUTPUTS_TITLE = "Every output of"  # the outputs list's description starts so
OUTPUT_LINKS = {"convert": [("maxtext_checkpoint", "maxtext_checkpoint")],
                "train": [("trained_checkpoint", "actor_checkpoint")],
                "export": [("hf_export", "hf_export")]}
CONSOLE = "https://console.cloud.google.com/storage/browser/"


SKIPPED_SUFFIX = " [skipped]"
NOT_RUN = "not run"  # a stage after the one a run stopped at


def skipped_state(output: StageOutput) -> StageOutput | State:
    """A skipped stage ends as Completed(name="Skipped"); the task's caller still gets the
    output as its result. The state's name shows in the task list's badge, but the run graph
    colours a node by state *type* alone (Prefect 3.9.1's UI: FlowRunGraph's
    ``node: e => ({background: h[e.state_type]})`` with ``COMPLETED: #219D4B``, in
    prefect/server/ui/assets/index-*.js, and the same in ui-v2's flow-run-graph-*.js; the
    graph API's nodes carry only ``label`` and ``state_type``, prefect/server/schemas/graph.py
    ``Node``), so a skip would be green like a run. The node's label is the task run's name
    (prefect/server/database/query_components.py: ``coalesce(..., TaskRun.name)``): a skipped
    task run is renamed to end in " [skipped]", which the graph does show."""
    if output.status != "skipped":
        return output
    _name_skipped()
    return Completed(name="Skipped", data=output,
                     message=f"{output.stage}: verified output already there, not rerun")


def _name_skipped() -> None:
    """Best-effort (a label never fails a stage). The engine's own task run object is
    renamed first: its final state event carries that object, and the server's task-run
    recorder upserts the name from the newest event (prefect 3.9.1
    server/services/task_run_recorder.py), which also covers a task run the recorder has
    not created yet (a PATCH is then a 404). The PATCH shows the name at once."""
    from prefect.client.orchestration import get_client
    from prefect.context import TaskRunContext

    ctx = TaskRunContext.get()
    if ctx is None or ctx.task_run.name.endswith(SKIPPED_SUFFIX):
        return
    name = f"{ctx.task_run.name}{SKIPPED_SUFFIX}"
    ctx.task_run.name = name
    try:
        with get_client(sync_client=True) as client:
            client.set_task_run_name(ctx.task_run.id, name)
    except Exception as exc:
        if getattr(getattr(exc, "response", None), "status_code", None) == 404:
            return  # not recorded yet: the final state event brings the name
        log.warning("the skipped task run was not renamed yet (its final state event "
                    "carries the name): %s", exc)


def console_url(uri: str) -> str | None:
    """The Cloud Console page of a gs:// object or prefix (the browser opens gs:// nowhere)."""
    if not uri.startswith("gs://"):
        return None
    return CONSOLE + uri.removeprefix("gs://").rstrip("/")


def output_markdown(name: str, uri: str, scope: str) -> str:
    """A local output as its path, not a file:// link a browser refuses to open."""
    return (f"**{md_text(name.replace('_', ' '))}** (latest of {md_text(scope)}):\n\n"
            f"{md_code(uri)}\n\n"
            "On the machine that ran the flow.")


def uri_markdown(uri: str) -> str:
    url = console_url(uri) or (uri if uri.startswith(("https://", "http://")) else None)
    return md_link(uri, url) if url else md_code(uri)


def outputs_markdown(done: dict[str, StageOutput], dataset: str | None = None) -> str:
    """Every finished stage's outputs in full (the table's cells would cut them off), under
    the dataset the run trains on (an announced one is no stage's output)."""
    lines = ["### Outputs of the stages that ended", ""]
    if dataset:
        lines += [f"Training data of this run: {uri_markdown(dataset)}", ""]
    for stage, output in done.items():
        lines.append(f"**{stage}** ({output.status})")
        lines += [f"- {name}: {uri_markdown(uri)}" for name, uri in output.uris.items()]
        lines.append("")
    if not done:
        lines.append("No stage has ended yet.")
    return "\n".join(lines) + "\n"


def publish_output(profile: str, scope: str, name: str, uri: str) -> None:
    """One output; the export under a key per profile *and* deployment (``scope``), so a
    rehearsal rerun never shows as the latest model of a retrain deployment of the same
    profile; the others on the run's page only (KEYED_OUTPUTS)."""
    key = f"tpurl-{slug(profile)}-{slug(scope)}-{slug(name)}" if name in KEYED_OUTPUTS else None
    description = f"{profile}: {name.replace('_', ' ')}, latest of {scope}"
    url = console_url(uri) or (uri if uri.startswith(("https://", "http://")) else None)
    if url:  # stored as the markdown [uri](url) (prefect/artifacts.py LinkArtifact)
        quiet.create("markdown", quiet.link_data(url, uri), key, description)
    else:
        quiet.create("markdown", output_markdown(name, uri, scope), key, description)


def stage_row(report: StageReport | None, stage: str, status: str = "") -> dict[str, Any]:
    if report is None:
        return {"stage": stage, "status": status, "outputs": "", "duration_s": None,
                "programs_s": None, "chip_hours": None, "usd": None, "preemptions": None,
                "preempted_chip_hours": None}
    return {"stage": report.stage, "status": report.status,
            "outputs": ", ".join(report.uris),  # names: in full in the outputs list
            "duration_s": round(report.duration_s, 1),
            "programs_s": round(sum(w.wall_s for w in report.workloads), 1),
            "chip_hours": round(report.chip_hours, 3), "usd": report.usd,
            "preemptions": sum(w.preemptions for w in report.workloads),
            "preempted_chip_hours": round(sum(w.preempted_chip_hours for w in report.workloads), 3)}


# Stages that resume from what an interrupted attempt wrote (they clear no leftovers:
# Stage.leftover_dirs in flows/stages/); the others start their output again.
RESUMING_STAGES = frozenset({"train"})


def stop_explanation(profile: str, stage: str, done: dict[str, StageOutput],
                     exc: BaseException, dataset: str | None = None) -> str:
    """The line a cancelled run leaves in its log: what is kept, how to resume (pure)."""
    kept = "; ".join(f"{s} ({', '.join(f'{k}={v}' for k, v in o.uris.items()) or 'done'})"
                     for s, o in done.items()) or "no finished stage"
    why = ("its time bound passed" if isinstance(exc, DeadlinePassed) else
           "cancelled by the user" if cancelled_by_user(exc) else type(exc).__name__)
    partial = ("its checkpoints so far are kept and the next run resumes from the newest"
               if stage in RESUMING_STAGES else
               "its partial output is discarded and the stage runs again")
    data = f" Training data: {dataset}." if dataset else ""
    return (f"run stopped during {stage} ({why}).{data} Kept, verified: {kept}. "
            f"{stage} did not finish: {partial}. To resume, run the same deployment with "
            f"the same parameters again (or `tpurl run {profile}`): finished stages are "
            "skipped. The profile's lock is released.")


class StagePage:
    """The stage table and outputs of one run, kept current as its stages end."""

    def __init__(self, profile: str, stages: list[str], scope: str,
                 dataset: str | None = None) -> None:
        self.profile, self.scope = profile, scope
        self.dataset = dataset  # what the run trains on: the profile's, or an announced one
        self.done: dict[str, StageOutput] = {}
        self.current: str | None = None  # the stage whose task is running
        self.rows = {s: stage_row(None, s, "pending") for s in stages}
        self.table_id: UUID | None = None
        self.outputs_id: UUID | None = None
        self._safely(self._create)

    def started(self, stage: str) -> None:
        """The table says the stage runs."""
        self.current = stage
        self._set(stage, stage_row(None, stage, "running"))

    def ended(self, stage: str, output: StageOutput, report: StageReport) -> None:
        """The stage's row and the outputs list show what it made (a skip too), and its
        output links are published."""
        self.current = None
        self.done[stage] = output
        self._set(stage, stage_row(report, stage))
        self._safely(self._publish_outputs)
        for name, uri_key in OUTPUT_LINKS.get(stage, []):
            if uri := output.uris.get(uri_key):
                self._safely(publish_output, self.profile, self.scope, name, uri)

    def stopped(self, stage: str, status: str, why: BaseException | None = None) -> None:
        """The stage ended ``status`` (cancelled, timedout, failed, …) and the stages after
        it did not run; with ``why`` (the stop that ended the run) the log says what is kept
        and how to resume."""
        self.current = None
        self._stopped(stage, status)
        if why is not None:
            self._safely(self._explain_stop, stage, why)

    def _stopped(self, stage: str, status: str) -> None:
        """The stage's row says how it ended, and the stages that never started say so
        instead of staying "pending" (one update of the table)."""
        self.rows[stage] = stage_row(None, stage, status)
        for name, row in self.rows.items():
            if row["status"] == "pending":
                self.rows[name] = stage_row(None, name, NOT_RUN)
        if self.table_id is not None:
            self._safely(self._update)

    def _explain_stop(self, stage: str, exc: BaseException) -> None:
        from prefect import get_run_logger
        from prefect.logging.handlers import APILogHandler

        get_run_logger().warning("%s", stop_explanation(self.profile, stage, self.done, exc,
                                                       self.dataset))
        # Sent now: after a cancel's SIGTERM the process may end before the log worker's
        # next batch goes out, and this line is the one the run page must keep.
        handlers = logging.getLogger("prefect.flow_runs").handlers  # prefect/logging/logging.yml
        for handler in handlers:
            if isinstance(handler, APILogHandler):
                handler.flush()
                break

    def _create(self) -> None:
        self.table_id = quiet.create(
            "table", quiet.table_data(list(self.rows.values())),
            f"tpurl-{slug(self.profile)}-stages",
            f"Stages of {self.profile}, updated as each starts and ends: status, "
            "time, chip-hours and the names of its outputs (in full in the outputs list)")

    def _publish_outputs(self) -> None:
        text = outputs_markdown(self.done, self.dataset)
        if self.outputs_id is None:
            # the run's own (unkeyed): the stage table is the page's keyed entry, and the
            # export's link keeps "the latest model"; a key costs an event
            self.outputs_id = quiet.create(
                "markdown", text, None, f"{OUTPUTS_TITLE} {self.profile}'s stages so far, in full")
        else:
            self._patch(self.outputs_id, text)

    def _set(self, stage: str, row: dict[str, Any]) -> None:
        self.rows[stage] = row
        if self.table_id is not None:
            self._safely(self._update)

    def _update(self) -> None:
        assert self.table_id is not None
        self._patch(self.table_id, quiet.table_data(list(self.rows.values())))

    @staticmethod
    def _patch(artifact_id: UUID, data: str) -> None:
        quiet.update(artifact_id, data)  # no event per update (quiet_artifacts.py says why)

    @staticmethod
    def _safely(call: Callable[..., Any], *args: Any) -> None:
        try:
            call(*args)
        except Exception as exc:
            log.warning("run page not updated: %s", exc)
