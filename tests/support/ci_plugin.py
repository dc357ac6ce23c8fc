"""The pytest hooks of tests/support/ci_rules.py, as a plugin module so that a test can load
them into an inner pytest run (tests/test_ci_rules.py) exactly as the suite's conftest does."""

from __future__ import annotations

import os
from collections import Counter

import pytest

from tests.support.ci_rules import ci_skip_message, count, in_ci, summary_lines
from tests.support.cpu_by_module import by_module, cpu_seconds, report_lines

_CPU_BY_TEST: Counter[str] = Counter()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """Each test's CPU (setup, call and teardown)."""
    before = cpu_seconds()
    try:
        return (yield)
    finally:
        _CPU_BY_TEST[item.nodeid] += cpu_seconds() - before


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    """Under CI=true a skip fails, naming what the test needed."""
    report = yield
    if report.skipped and in_ci(os.environ) and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = ci_skip_message(reason.removeprefix("Skipped: "))
    return report


def pytest_terminal_summary(terminalreporter) -> None:
    """Test functions and cases counted apart, the matrices named."""
    passed = [report.nodeid for report in terminalreporter.stats.get("passed", [])
              if getattr(report, "when", "call") == "call"]
    if passed:
        terminalreporter.section("what passed")
        for line in summary_lines(count(passed)):
            terminalreporter.write_line(line)
    for title, lines in (("CPU by module", report_lines(by_module(_CPU_BY_TEST))),
                         ("CPU by test", report_lines(_CPU_BY_TEST, "tests", top=15))):
        if lines:
            terminalreporter.section(title)
            for line in lines:
                terminalreporter.write_line(line)
