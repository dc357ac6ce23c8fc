"""Under CI=true a skip fails naming what it needed, and the summary counts test functions and
cases apart: through a real inner pytest run with the suite's own plugin."""

from __future__ import annotations

import pytest

from flows.common.paths import REPO_ROOT
from tests.support.ci_rules import COUNTS_PREFIX, count, function_of, in_ci

pytest_plugins = ["pytester"]

_SKIPPING = """
import pytest

def test_needs_a_mount():
    pytest.skip("cannot mount a tmpfs here: permission denied")

@pytest.mark.xfail(reason="known")
def test_expected_to_fail():
    assert False

@pytest.mark.parametrize("n", range(12))
def test_matrix(n):
    assert n >= 0

@pytest.mark.parametrize("n", range(3))
def test_few(n):
    assert n >= 0

def test_one():
    pass
"""


def _run(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, ci: str | None):
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    monkeypatch.setenv("PYTHONPATH", str(REPO_ROOT))  # the plugin is tests.support.ci_plugin
    pytester.makepyfile(test_inner=_SKIPPING)
    return pytester.runpytest_subprocess("-p", "tests.support.ci_plugin", "-p",
                                         "no:cacheprovider")


@pytest.mark.parametrize("ci", ["true", "1", "TRUE"])
def test_a_skip_under_ci_fails_naming_what_it_needed(pytester: pytest.Pytester,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     ci: str) -> None:
    result = _run(pytester, monkeypatch, ci)
    result.assert_outcomes(passed=16, failed=1, xfailed=1)
    result.stdout.fnmatch_lines(["*skipped under CI=true*cannot mount a tmpfs here*"])


@pytest.mark.parametrize("ci", [None, "", "false", "0"])
def test_outside_ci_a_skip_stays_a_skip(pytester: pytest.Pytester,
                                        monkeypatch: pytest.MonkeyPatch,
                                        ci: str | None) -> None:
    result = _run(pytester, monkeypatch, ci)
    result.assert_outcomes(passed=16, skipped=1, xfailed=1)


def test_the_summary_counts_functions_and_cases_apart(pytester: pytest.Pytester,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    result = _run(pytester, monkeypatch, None)
    result.stdout.fnmatch_lines([
        "3 test functions passed (16 cases); 1 of them are matrices of 10+ cases (12 cases),"
        " so 2 functions checked 4 cases one by one",
        "  matrix: test_inner.py::test_matrix (12 cases)",
        f"{COUNTS_PREFIX} functions=3 cases=16 matrices=1 matrix_cases=12",
    ])


def test_count_groups_cases_by_function() -> None:
    ids = ["a.py::t[1]", "a.py::t[2]", "a.py::C::t[x-y]", "b.py::u", "a.py::t[[nested]]"]
    counts = count(ids, matrix_cases=3)
    assert (counts.functions, counts.cases) == (3, 5)
    assert counts.matrices == (("a.py::t", 3),)
    assert function_of("a.py::C::t[x-y]") == "a.py::C::t"


def test_in_ci_reads_the_usual_values() -> None:
    assert in_ci({"CI": "true"}) and in_ci({"CI": "1"}) and in_ci({"CI": " Yes "})
    assert not in_ci({}) and not in_ci({"CI": "false"}) and not in_ci({"CI": ""})


_COSTS = {
    "test_costly": """
import time

def test_computes():
    ended = time.process_time() + 0.6
    while time.process_time() < ended:
        pass

def test_waits():
    time.sleep(0.6)
""",
    "test_cheap": """
def test_nothing():
    pass
""",
}


def test_the_summary_names_the_costliest_modules_and_tests_by_cpu(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """CPU, not wall: the test that waits as long as the other computes is not the costly one;
    a module's figure is its tests' sum."""
    monkeypatch.setenv("PYTHONPATH", str(REPO_ROOT))
    pytester.makepyfile(**_COSTS)
    result = pytester.runpytest_subprocess("-p", "tests.support.ci_plugin", "-p",
                                           "no:cacheprovider")
    result.assert_outcomes(passed=3)
    out = result.stdout.str()
    modules = out.split("CPU by module")[1].split("CPU by test")[0].splitlines()
    tests = out.split("CPU by test")[1].splitlines()
    assert any(" s of CPU in 2 modules; the most:" in line for line in modules), out
    assert next(line for line in modules if line.endswith(".py")).endswith("test_costly.py")
    assert any(" s of CPU in 3 tests; the most:" in line for line in tests), out
    ranked = [line.split()[-1] for line in tests if "::" in line]
    assert ranked[0] == "test_costly.py::test_computes", tests
    costs = {line.split()[-1]: float(line.split()[0]) for line in tests if "::" in line}
    assert costs["test_costly.py::test_computes"] >= 0.5
    assert costs["test_costly.py::test_waits"] < 0.3
    module = next(float(line.split()[0]) for line in modules if line.endswith("test_costly.py"))
    assert module == pytest.approx(costs["test_costly.py::test_computes"]
                                   + costs["test_costly.py::test_waits"], abs=0.15)
