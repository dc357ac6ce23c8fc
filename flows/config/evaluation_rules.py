"""Cross-field rules of the eval and promotion sections (flows/config/evaluation.py)."""

from __future__ import annotations

from flows.common.issues import Issue
from flows.config.profile import Profile


def evaluation_issues(profile: Profile) -> list[Issue]:
    """Cross-field rules: promotion needs scores; a declared set is not the training set;
    evaluation runs where its program is (the rehearsal so far)."""
    issues: list[Issue] = []
    if profile.promotion is not None and profile.eval is None:
        issues.append(Issue("promotion", "is set but there is no eval section, so nothing "
                            "is scored to promote on", "add `eval: {}` (the dataset's test "
                            "split) or remove promotion", "config/eval-missing"))
    if profile.eval is None:
        return issues
    if profile.eval.files and profile.eval.files == profile.data.train_files:
        issues.append(Issue("eval.files", "names the training files: a model scored on rows "
                            "it trained on says nothing", "give a held-out file, or remove "
                            "eval.files to use the dataset's test split", "config/eval-overlap"))
    if profile.backend != "local":
        issues.append(Issue("eval", "the evaluation program runs only in the rehearsal so far "
                            "(its GKE JobSet and image layer are not built: NOTES.md, issue 24)",
                            "remove the eval and promotion sections from this profile",
                            "config/eval-unsupported"))
    return issues
