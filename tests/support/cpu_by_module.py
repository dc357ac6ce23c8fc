"""The CPU each test module and each test used, for the end of a pytest run: on two cores
shared by the tiers and lanes of scripts/test.sh, the wall time of a test says little (it
waits while others compute) and its CPU says what it costs the run. The costliest tests are
named too: a module's figure hides which of its tests (or which module fixture, counted in
the test that set it up or tore it down) to make cheaper.

Per test: user + system time of this process and of the children it reaped (servers, CLIs,
programs: counted when waited for), also summed by module. A child reaped in a later test is
counted there; daemons that are never reaped (dockerd, a kept API server) are not counted."""

from __future__ import annotations

import resource
from collections import Counter


def cpu_seconds() -> float:
    """This process's CPU so far, and that of every child it has reaped."""
    own, children = (resource.getrusage(who) for who in
                     (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def by_module(by_test: Counter[str]) -> Counter[str]:
    """Each module's CPU: the sum of its tests'."""
    modules: Counter[str] = Counter()
    for nodeid, seconds in by_test.items():
        modules[module_of(nodeid)] += seconds
    return modules


def report_lines(costs: Counter[str], what: str = "modules", top: int = 12) -> list[str]:
    """The ``what`` (modules or tests) that used the most CPU, with their share of the run's."""
    total = sum(costs.values())
    if total <= 0:
        return []
    lines = [f"{total:.0f} s of CPU in {len(costs)} {what}; the most:"]
    for name, seconds in costs.most_common(top):
        lines.append(f"{seconds:8.1f} s {seconds / total:4.0%}  {name}")
    return lines
