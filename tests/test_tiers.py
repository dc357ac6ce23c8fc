"""The tier rules of tests/support/tiers.py hold for the test tree: a module that starts a
Prefect API itself is in the services tier, where scripts/test.sh expects it, not in the
fast one (the fast tier took 9 minutes when three such modules sat in it)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.tiers import E2E_DIR, SERVICE_FIXTURES

TESTS = Path(__file__).resolve().parent
# What in a test module starts a Prefect API of its own: a `prefect server start`, a flow
# child or probe whose private API (flows/console/interrupts.py) starts with it, a lock holder
# process, a `tpurl run`/`teardown` that reaches its private API.
STARTERS = ("prefect_server_in(", "flow_child(", "tests.support.lock_holder", "private_api(",
            '"run", TUTORIAL', "_tpurl(answer=", "_tpurl(\"--delete-bucket\", \"--confirm-bucket\"")
USES_SERVICE = re.compile(r"\b(" + "|".join(sorted(SERVICE_FIXTURES)) + r")\b")


def _modules() -> list[Path]:
    return sorted(p for p in TESTS.rglob("test_*.py")
                  if not p.is_relative_to(E2E_DIR) and p != Path(__file__).resolve())


def test_a_module_that_starts_a_prefect_api_is_a_services_module():
    fast = []
    for module in _modules():
        source = module.read_text()
        starts = [s for s in STARTERS if s in source]
        code = "\n".join(line for line in source.splitlines()
                         if not line.startswith(("from ", "import ")))
        if starts and not ("pytest.mark.services" in source or USES_SERVICE.search(code)):
            fast.append(f"{module.relative_to(TESTS)} ({', '.join(starts)})")
    assert not fast, ("these start a Prefect API but sit in the fast tier; add `pytestmark = "
                      "[pytest.mark.services]` (and `pytest.mark.realtime` if the module "
                      f"mostly waits): {fast}")


def test_realtime_modules_are_services_modules():
    marked = [m for m in _modules() if "pytest.mark.realtime" in m.read_text()]
    assert marked and all("pytest.mark.services" in m.read_text() for m in marked), marked


def test_every_test_path_the_test_script_names_exists() -> None:
    """scripts/test.sh runs some modules by path in lanes of their own: a module moved or
    renamed would end that lane with "file or directory not found" (and its tests unrun)."""
    import re

    from flows.common.paths import REPO_ROOT

    script = (REPO_ROOT / "scripts" / "test.sh").read_text()
    named = set(re.findall(r"\btests/[\w/]+(?:\.py)?", script))
    assert "tests/test_profile_lock.py" in named
    assert not [path for path in sorted(named) if not (REPO_ROOT / path).exists()]
