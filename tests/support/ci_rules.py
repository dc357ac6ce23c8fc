"""What a CI run may not do quietly, and how its test counts are told.

- A skip is a test that proved nothing. Outside CI a skip says what the machine lacks (no
  root to mount a tmpfs, no apt-get for dockerd); under ``CI=true`` the same test must run,
  so its skip is turned into a failure naming what it needed. CI installs and starts what
  the tests need: a skip there can only hide a missing install step or a refused fault.
- A parametrized function with many cases is one behaviour checked over an input space, not
  that many behaviours. The summary counts test functions and cases apart, and names the
  matrices (functions of ``MATRIX_CASES`` cases or more), so the count reflects what is proven.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

MATRIX_CASES = 10  # cases of one function from which it counts as a matrix
COUNTS_PREFIX = "tpurl-counts:"  # the machine-readable summary line scripts/test.sh adds up
_TRUE = frozenset({"1", "true", "yes", "on"})


def in_ci(environ: Mapping[str, str]) -> bool:
    """CI sets ``CI=true`` (the workplace's CI, GitHub Actions, GitLab and most others)."""
    return environ.get("CI", "").strip().lower() in _TRUE


def ci_skip_message(reason: str) -> str:
    """The failure text for a skip under CI: the skip's own reason says what was missing."""
    return (f"skipped under CI=true, where every test must run: {reason}. CI installs and "
            "starts what the tests need (scripts/test.sh); make it provide this, or change "
            "the test so it can run there")


def function_of(nodeid: str) -> str:
    """``path::Class::test[case]`` → ``path::Class::test``: the behaviour a case belongs to."""
    return re.sub(r"\[.*\]$", "", nodeid)


@dataclass(frozen=True)
class Counts:
    functions: int  # test functions with at least one passed case
    cases: int  # passed cases in all
    matrices: tuple[tuple[str, int], ...]  # (function, passed cases), largest first

    @property
    def matrix_cases(self) -> int:
        return sum(cases for _, cases in self.matrices)

    def line(self) -> str:
        return (f"{COUNTS_PREFIX} functions={self.functions} cases={self.cases} "
                f"matrices={len(self.matrices)} matrix_cases={self.matrix_cases}")


def count(passed_nodeids: Iterable[str], matrix_cases: int = MATRIX_CASES) -> Counts:
    per_function = Counter(function_of(nodeid) for nodeid in passed_nodeids)
    matrices = sorted(((name, n) for name, n in per_function.items() if n >= matrix_cases),
                      key=lambda item: (-item[1], item[0]))
    return Counts(functions=len(per_function), cases=sum(per_function.values()),
                  matrices=tuple(matrices))


def summary_lines(counts: Counts, shown: int = 8) -> list[str]:
    """What a person reads at the end of a pytest run, then the line test.sh adds up."""
    lines = [f"{counts.functions} test functions passed ({counts.cases} cases); "
             f"{len(counts.matrices)} of them are matrices of {MATRIX_CASES}+ cases "
             f"({counts.matrix_cases} cases), so {counts.functions - len(counts.matrices)} "
             f"functions checked {counts.cases - counts.matrix_cases} cases one by one"]
    lines += [f"  matrix: {name} ({n} cases)" for name, n in counts.matrices[:shown]]
    if len(counts.matrices) > shown:
        lines.append(f"  ... and {len(counts.matrices) - shown} more matrices")
    lines.append(counts.line())
    return lines
