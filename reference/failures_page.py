"""The failure vocabulary: every category (`FailureCategory`, what the flow does with it)
and every stable code (`Failure`), with the categories it is raised with and the modules
that set it, found by reading the package's source for ``Failure.NAME``. Automations match
on these strings; they are never renamed."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from flows.common.failure_codes import Failure, FailureCategory
from flows.common.paths import REPO_ROOT
from flows.core.failures import RETRYABLE, STORAGE_ERRNOS
from reference.markdown import table
from reference.symptoms import anchor

PACKAGE = REPO_ROOT / "flows"
# the codes looked up by name rather than written out: flows/core/failures.py storage_error
_STORAGE_MODULE = "flows/core/failures.py"
TROUBLESHOOTING = "troubleshooting.md"
# the enum's own module declares the codes rather than setting them
_DECLARING = "common/failure_codes.py"

_WHAT_HAPPENS = {
    FailureCategory.PREEMPTED: "resubmitted, resuming from the newest checkpoint, within the "
                               "preemption budget",
    FailureCategory.INFRASTRUCTURE: "retried with backoff (the task's retries)",
    FailureCategory.QUEUE_TIMEOUT: "the stage fails with Kueue's reason; not retried",
    FailureCategory.STALLED: "the stage fails with the log tail; not retried",
    FailureCategory.USER_ERROR: "the stage fails at once with the cause and the log tail",
    FailureCategory.INTERNAL: "a bug of the pipeline's own: fails with its traceback; report it",
    FailureCategory.BUDGET: "a spend cap was reached: stopped, not retried",
    FailureCategory.CANCELLED: "stopped on purpose from outside: never retried",
}


def codes_in(package: Path = PACKAGE) -> dict[Failure, set[str]]:
    """code → modules (relative to the repository) that name it as ``Failure.NAME``."""
    found: dict[Failure, set[str]] = defaultdict(set)
    for path in sorted(package.rglob("*.py")):
        if path.relative_to(package).as_posix() == _DECLARING:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id == "Failure" and node.attr in Failure.__members__):
                found[Failure[node.attr]].add(str(path.relative_to(package.parent)))
    for name in STORAGE_ERRNOS:  # storage_error looks these up by the errno's name
        found[Failure[f"STORAGE_{name}"]].add(_STORAGE_MODULE)
    return dict(found)


def _categories(code: Failure) -> str:
    return ", ".join(f"`{c}`" for c in code.categories) or "refused before anything runs"


def render() -> str:
    lines = ["# Failure categories and codes", "",
             "Generated from `flows/common/failure_codes.py` and the codes set in `flows/` by "
             "`python -m reference`; do not edit by hand. Every `tpurl.stage.failed` "
             "event carries `category`, `code`, `summary`, `fix` and `log`.", "",
             "## Categories", ""]
    lines += table(["category", "retried", "what the flow does"],
                   [[f"`{c.value}`", "yes" if c in RETRYABLE else "no", _WHAT_HAPPENS[c]]
                    for c in FailureCategory])
    codes = codes_in()
    lines += ["", "## Codes", "", f"{len(codes)} codes, each finer than its category; each "
              f"links to what is seen and what to do ([troubleshooting]({TROUBLESHOOTING})).",
              ""]
    lines += table(["code", "category", "set in", "symptom and fix"],
                   [[f"`{code}`", _categories(code), ", ".join(f"`{m}`" for m in sorted(mods)),
                     f"[what to do]({TROUBLESHOOTING}#{anchor(code)})"]
                    for code, mods in sorted(codes.items())])
    return "\n".join(lines) + "\n"
