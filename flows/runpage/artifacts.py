"""What the run page shows: training progress, metrics, the announcement served.

Keys are stable per profile (``tpurl-<profile>-…``) so Prefect keeps a history per key.
Publishing is best-effort: a UI nicety never fails a run.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Sequence
from typing import Any
from uuid import UUID

from flows.announcements.model import Announcement, RunAnnouncement
from flows.config.profile import Profile
from flows.core.recipe_files import recipe_summary
from flows.run.result import PipelineResult
from flows.runpage import quiet_artifacts as quiet
from flows.runpage.alignment import per_update, reward_offset
from flows.runpage.charts import metrics_chart_markdown
from flows.runpage.markdown_text import md_text
from flows.runpage.metrics import logged_tags, reward_function_tag, reward_functions_logged
from flows.runpage.recipe import recipe_label, recipe_markdown

log = logging.getLogger(__name__)

# MaxText 0.2.4's RL optimizer (maxtext/trainers/post_train/rl/utils_rl.py get_optimizer) is
# optax's warmup_cosine_decay_schedule, so the logged learning rate is the schedule's value at
# that step, not the configured one (the rehearsal's 2 steps: step 1 at half the peak).
LR_NOTE = ("learning_rate is the schedule's value at that step, not the configured peak: "
           "MaxText warms up linearly over 10 % of the steps, then decays it along a cosine to "
           "0 by the last step (with 2 steps: no warmup, step 1 at half the peak)")


def slug(text: str) -> str:
    return "-".join("".join(c if c.isalnum() else " " for c in text.lower()).split())


class TrainingProgress:
    """Drives a progress artifact from the step counter in the training log."""

    def __init__(self, logger: Any) -> None:
        self.logger = logger
        self.artifact_id: UUID | None = None
        self.last_step = -1
        # Made in the task's thread: a backend may call back from its log-reading thread,
        # where Prefect's run context (which links the artifact to the run) is not set.
        self._context = contextvars.copy_context()

    def __call__(self, workload: str, step: int, total: int | None) -> None:
        if step <= self.last_step:
            return
        self.last_step = step
        if self._in_run_context():
            self._publish(workload, step, total)
        else:
            self._context.copy().run(self._publish, workload, step, total)

    @staticmethod
    def _in_run_context() -> bool:
        from prefect.context import TaskRunContext

        return TaskRunContext.get() is not None

    def _publish(self, workload: str, step: int, total: int | None) -> None:
        percent = min(100.0, 100.0 * step / total) if total else 0.0
        self.logger.info("%s: step %d/%s", workload, step, total or "?")
        # The card's bar has no number: the description carries the percent and the steps.
        description = progress_description(workload, step, total)
        try:
            if self.artifact_id is None:
                self.artifact_id = quiet.create("progress", percent, None, description)
            else:
                quiet.update(self.artifact_id, percent, description)
        except Exception as exc:
            self.logger.warning("progress artifact not updated: %s", exc)


def progress_description(workload: str, step: int, total: int | None) -> str:
    if not total:
        return f"{workload}: GRPO step {step} (total unknown)"
    return f"{workload}: {min(100.0, 100.0 * step / total):.0f}% ({step} of {total} GRPO steps)"


def publish_result(result: PipelineResult) -> None:
    """What only the whole run knows: its metrics and curves (the stage table and each
    stage's outputs are already on the page, flows/runpage/live.py)."""
    key = f"tpurl-{slug(result.profile)}"
    try:
        functions = result.recipe.get("reward_functions") or []
        rows = metric_rows(result.metrics, functions)
        if rows:
            shifted = reward_offset(result.metrics.get("steps", []))
            quiet.create("table", quiet.table_data(rows), f"{key}-metrics", (
                "Training metrics per GRPO update (TensorBoard); each reward function's "
                f"mean is the column of its name ({recipe_label(result.recipe)})" + (
                    "; rewards and completion length are the rollout's, logged at the "
                    "step before the update" if shifted else "") + "; " + LR_NOTE))
        chart = metrics_chart_markdown(result.metrics, functions, result.health)
        if chart:
            # the run's own (unkeyed): the metrics table above keeps the history by its key,
            # and each keyed artifact costs an artifact-collection event
            quiet.create("markdown", chart, None, "Reward and loss per GRPO step")
        if result.health:
            quiet.create("markdown", health_markdown(result), None,
                         "Training health: what the sentinel saw, and what it did")
        if text := throughput_markdown(result):
            quiet.create("markdown", text, None, "Throughput from the programs' own metrics")
        for name, (link, text) in tracking_links(result).items():
            quiet.create("link", quiet.link_data(link, text), f"{key}-{name}", text)
    except Exception as exc:
        log.warning("artifacts not published: %s", exc)


def health_markdown(result: PipelineResult) -> str:
    """The training sentinel's findings: detector, step, policy, what it saw; and for a hold,
    the command that clears it. Pure."""
    held = (result.evaluation or {}).get("decision", {}).get("held")
    lines = ["| detector | step | policy | what it saw |", "|---|---|---|---|"]
    lines += [f"| {md_text(str(f.get('detector')))} | {f.get('step')} | "
              f"{md_text(str(f.get('policy')))} | {md_text(str(f.get('summary')))} |"
              for f in result.health]
    if held:
        lines += ["", "The promotion passed its rule and is **held**: read the findings, then "
                  f"`tpurl promote {result.profile} --clear <this run> --reason ...` "
                  "(docs/how-to/held-run.md)."]
    return "\n".join(lines) + "\n"


def throughput_markdown(result: PipelineResult) -> str:
    """The run's throughput as the run page shows it (flows/core/throughput.py), or "" when
    the run logged no step's duration. Pure."""
    from flows.core.throughput import line_of

    line = line_of(result.throughput)
    return f"**Throughput** · {md_text(line)}\n" if line else ""


def tracking_links(result: PipelineResult) -> dict[str, tuple[str, str]]:
    """The run page's links out: the TensorBoard event directory (`tensorboard
    --logdir` it; on GKE the bucket's browser page), and where the run was also reported."""
    links: dict[str, tuple[str, str]] = {}
    logdir = result.tensorboard_logdir
    if logdir:
        browse = (f"https://console.cloud.google.com/storage/browser/{logdir[5:]}"
                  if logdir.startswith("gs://") else logdir)
        links["tensorboard"] = (browse, f"TensorBoard events: tensorboard --logdir {logdir}")
    for tracker, where in result.tracking.items():
        if where.startswith("https://") or where.startswith("http://"):
            links[tracker] = (where, f"This run in {tracker}")
    return links


def publish_parity(profile: str, lines: list[str]) -> None:
    """A markdown artifact: where the rehearsal's lock differs from the image just built
    (flows/backends/gke/image/parity.py), so the run page says what the rehearsal proved."""
    try:
        quiet.create("markdown", "### Rehearsal parity\n\n" + "\n".join(
            f"- {line.strip()}" for line in lines[1:]) + "\n",
            f"tpurl-{slug(profile)}-rehearsal-parity", lines[0])
    except Exception as exc:
        log.warning("rehearsal parity artifact not published: %s", exc)


def publish_recipe(profile: Profile) -> None:
    """The Recipe section at the run's start, so a run that fails in training shows it too
    (flows/runpage/recipe.py says why it is there)."""
    try:
        summary = recipe_summary(profile)
        quiet.create("markdown", recipe_markdown(summary), f"tpurl-{slug(profile.name)}-recipe",
                     f"Recipe: {recipe_label(summary)}")
    except Exception as exc:  # a UI nicety never fails a run
        log.warning("recipe artifact not published: %s", exc)


def publish_announcement(profile: str, record: RunAnnouncement) -> None:
    """A markdown artifact at the top of the run page: what this run was announced for."""
    try:
        quiet.create("markdown", announcement_markdown(record),
                     f"tpurl-{slug(profile)}-announcement",
                     "The announcements this run serves and the ones coalesced into it")
    except Exception as exc:
        log.warning("announcement artifact not published: %s", exc)


def announcement_markdown(record: RunAnnouncement) -> str:
    lines = ["### Announcements this run serves", "",
             "| kind | value | event | occurred |", "| --- | --- | --- | --- |"]
    lines += [_row(a) for a in record.serves.values()]
    if record.coalesced:
        lines += ["", "### Coalesced into this run (never trained on their own)", "",
                  "| kind | value | event | occurred |", "| --- | --- | --- | --- |"]
        lines += [_row(a) for a in record.coalesced]
    else:
        lines += ["", "Nothing was coalesced into this run."]
    return "\n".join(lines) + "\n"


def _row(item: Announcement) -> str:
    """Every cell escaped: the value and id come from an unauthenticated emitter."""
    cells = (item.kind, item.value, item.event_id, item.occurred.isoformat())
    return "| " + " | ".join(md_text(c) for c in cells) + " |"


# The tags a reader wants per step (the rest stays in the result and in TensorBoard).
METRIC_COLUMNS = {"rewards/train/mean": "reward_mean", "rewards/train/min": "reward_min",
                  "rewards/train/max": "reward_max", "actor/train/loss": "loss",
                  "actor/train/kl": "kl", "actor/train/grad_norm": "grad_norm",
                  "actor/train/learning_rate": "learning_rate",
                  "completions/train/mean_length": "completion_length"}


def reward_columns(metrics: dict[str, Any], functions: Sequence[str] = ()) -> dict[str, str]:
    """tag → column for each reward function's mean: the column is the function's own name,
    unless that is already a column (``loss``), then ``reward <name>``. Pure."""
    taken = {"step", *METRIC_COLUMNS.values()}
    return {reward_function_tag(name): f"reward {name}" if name in taken else name
            for name in reward_functions_logged(logged_tags(metrics), functions)}


def metric_rows(metrics: dict[str, Any], functions: Sequence[str] = ()) -> list[dict[str, Any]]:
    """One row per GRPO update: the rewards of its rollout beside its loss, even where the
    two are logged at neighbouring steps (flows/runpage/alignment.py, as the chart), and
    each reward function's mean under its name (``functions``: the recipe's, first)."""
    rows = []
    columns = {**METRIC_COLUMNS, **reward_columns(metrics, functions)}
    for update in per_update(metrics.get("steps", []))[0]:
        row: dict[str, Any] = {"step": update["step"]}
        for tag, column in columns.items():
            value = update.get(tag)
            row[column] = round(value, 6) if isinstance(value, float) else value
        rows.append(row)
    return rows
