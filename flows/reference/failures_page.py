"""The failure vocabulary: every category (`FailureCategory`, what the flow does with it)
and every stable code, found by reading the package's source for string literals shaped
``<area>/<name>`` whose area is one of the failure areas (``_AREAS``), with the modules that
hold them. Codes are written where the failure is diagnosed, often through a helper that
takes the code positionally, so the source's literals are the one complete list.
Automations match on these strings; they are never renamed."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path
from typing import TypeGuard

from flows.common.paths import REPO_ROOT
from flows.core.failure_codes import by_code
from flows.core.failures import RETRYABLE, STORAGE_ERRNOS, FailureCategory
from flows.reference.markdown import table

PACKAGE = REPO_ROOT / "flows"
_CODE_SHAPE = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-/")
_AREAS = ("config", "data", "environment", "eval", "gke", "image", "infra", "kueue", "profile",
          "recipe", "run", "storage")
# the one code set from a value rather than a literal: flows/core/failures.py storage_error
_STORAGE_MODULE = "flows/core/failures.py"
TROUBLESHOOTING = "troubleshooting.md"
# modules that describe codes rather than set them: their literals say nothing of the source
_DESCRIBING = ("core/failure_codes.py", "reference/")

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


def _is_code(value: object) -> TypeGuard[str]:
    return (isinstance(value, str) and value.count("/") == 1 and set(value) <= _CODE_SHAPE
            and value.split("/")[0] in _AREAS and all(value.split("/")))


def codes_in(package: Path = PACKAGE) -> dict[str, set[str]]:
    """code → modules (relative to the repository) that set it."""
    found: dict[str, set[str]] = defaultdict(set)
    for path in sorted(package.rglob("*.py")):
        if path.relative_to(package).as_posix().startswith(_DESCRIBING):
            continue
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and _is_code(node.value):
                found[node.value].add(str(path.relative_to(package.parent)))
    return dict(found)


def formatted_codes() -> dict[str, set[str]]:
    """code → modules for the codes built from a value (``storage/<errno name>``, one per
    file-system refusal ``storage_error`` diagnoses), which no literal spells out."""
    return {f"storage/{name}": {_STORAGE_MODULE} for name in STORAGE_ERRNOS}


def all_codes(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Every code the package sets: its literals and the formatted ones."""
    return {**codes_in(package), **formatted_codes()}


def _entry_link(code: str) -> str:
    entry = by_code().get(code)
    return f"[what to do]({TROUBLESHOOTING}#{entry.anchor})" if entry else ""


def render() -> str:
    lines = ["# Failure categories and codes", "",
             "Generated from `flows/core/failures.py`, `flows/core/failure_codes.py` and the "
             "codes set in `flows/` by "
             "`python -m flows.reference`; do not edit by hand. Every `tpurl.stage.failed` "
             "event carries `category`, `code`, `summary`, `fix` and `log`.", "",
             "## Categories", ""]
    lines += table(["category", "retried", "what the flow does"],
                   [[f"`{c.value}`", "yes" if c in RETRYABLE else "no", _WHAT_HAPPENS[c]]
                    for c in FailureCategory])
    codes = all_codes()
    lines += ["", "## Codes", "", f"{len(codes)} codes, each finer than its category; each "
              f"links to what is seen and what to do ([troubleshooting]({TROUBLESHOOTING})).",
              ""]
    lines += table(["code", "set in", "symptom and fix"],
                   [[f"`{code}`", ", ".join(f"`{m}`" for m in sorted(mods)), _entry_link(code)]
                    for code, mods in sorted(codes.items())])
    return "\n".join(lines) + "\n"
