"""Cross-field rules of the eval and promotion sections (flows/config/evaluation.py)."""

from __future__ import annotations

from flows.common.failure_codes import Failure
from flows.common.issues import Issue
from flows.config.capacity import run_budget_problem
from flows.config.eval_hours import EVALUATE, stage_hours
from flows.config.limits import limits
from flows.config.profile import Profile

REMOTE_SCHEMES = ("gs://", "hf://")  # what MaxText's get_dataset reads from inside a pod


@limits({"promotion": "only with an eval section",
         "eval.files": ["not data.train_files",
                        f"with backend: gke, a bucket or hub URI ({', '.join(REMOTE_SCHEMES)})"],
         "watch.files": ["not data.train_files", "no '..' segment",
                         f"with backend: gke, a bucket or hub URI ({', '.join(REMOTE_SCHEMES)})"],
         "gke.max_run_hours": "with flex-start or queued and eval: at least the evaluation's "
                              "estimate (both models)",
         "gke.run_budget_s": "with flex-start or queued, eval and gke.train_run_budget_s: at "
                             "most gke.max_run_hours x 3600"})
def evaluation_issues(profile: Profile) -> list[Issue]:
    """Cross-field rules: promotion needs scores; a declared set is not the training set and,
    on GKE, is where the evaluation pod can read it."""
    issues: list[Issue] = []
    if profile.promotion is not None and profile.eval is None:
        issues.append(Issue("promotion", "is set but there is no eval section, so nothing "
                            "is scored to promote on", "add `eval: {}` (the dataset's test "
                            "split) or remove promotion", Failure.CONFIG_EVAL_MISSING))
    if profile.eval is None:
        return issues
    if profile.eval.files and profile.eval.files == profile.data.train_files:
        issues.append(Issue("eval.files", "names the training files: a model scored on rows "
                            "it trained on says nothing", "give a held-out file, or remove "
                            "eval.files to use the dataset's test split", Failure.CONFIG_EVAL_OVERLAP))
    files = profile.eval.files
    if profile.backend == "gke" and files and not files.startswith(REMOTE_SCHEMES):
        issues.append(Issue("eval.files", f"{files!r} is not a bucket or hub URI: the "
                            "evaluation runs in a pod on the cluster, which cannot read a path "
                            "of this machine", "upload the parquet files and give their "
                            "gs://BUCKET/... URI (or hf://datasets/...)", Failure.CONFIG_EVAL_FILES))
    issues += _watch_set_issues(profile)
    issues += _flex_start_outlived(profile)
    return issues


def _watch_set_issues(profile: Profile) -> list[Issue]:
    """The watch's own set, as eval.files is checked: not the training rows, where the pod
    can read it, and no '..' that would climb out of the prefix it names (its content is
    checked when a watch starts: flows/core/watch_set.py)."""
    files = profile.watch.files if profile.watch else None
    if not files:
        return []
    out = []
    if files == profile.data.train_files:
        out.append(Issue("watch.files", "names the training files: a champion scored on rows "
                         "it trained on says nothing", "give a held-out file, or remove "
                         "watch.files to watch on the promotion's held-out set",
                         Failure.CONFIG_EVAL_OVERLAP))
    if ".." in files.replace("\\", "/").split("/"):
        out.append(Issue("watch.files", f"{files!r} holds a '..' segment", "name the files "
                         "by their own path, without '..'", Failure.CONFIG_EVAL_FILES))
    if profile.backend == "gke" and not files.startswith(REMOTE_SCHEMES):
        out.append(Issue("watch.files", f"{files!r} is not a bucket or hub URI: the watch's "
                         "evaluation runs in a pod on the cluster, which cannot read a path of "
                         "this machine", "upload the parquet files and give their "
                         "gs://BUCKET/... URI (or hf://datasets/...)", Failure.CONFIG_EVAL_FILES))
    return out


def _flex_start_outlived(profile: Profile) -> list[Issue]:
    """The evaluate stage holds the slice too, so on flex-start (or queued, anywhere in the
    capacity chain) its nodes must outlive it as
    training's must (flows/config/capacity.py checks training). The stage's estimate counts
    both models of a first run, one JobSet after the other, on nodes that may stay up between
    them: flex-start ends a node max_run_duration after it started, whichever job it runs."""
    gke = profile.gke
    if gke is None or not gke.bounded_run or gke.max_run_hours is None:
        return []
    out: list[Issue] = []
    # the evaluation's watch budget is gke.run_budget_s (flows/core/budgets.py); with no
    # train_run_budget_s the section's own rule already refused it for the training
    if gke.train_run_budget_s and (found := run_budget_problem(
            gke.max_run_hours, "run_budget_s", gke.run_budget_s, "evaluation")):
        field, problem, fix = found
        out.append(Issue(f"gke.{field}", problem, fix, Failure.CONFIG_FLEX_START_RUN))
    hours = stage_hours(profile, EVALUATE)
    if hours <= gke.max_run_hours:
        return out
    return [*out, Issue("gke.max_run_hours", f"{gke.max_run_hours:g} h is shorter than the "
                  f"estimated evaluation ({hours:g} h, both models): the flex-start nodes "
                  "would be reclaimed before it ends, every time",
                  f"raise gke.max_run_hours to at least {hours:g} (at most 168), or lower "
                  "gke.estimated_hours.evaluate or eval.batches if the estimate is wrong",
                  Failure.CONFIG_FLEX_START_RUN)]
