"""flows/ passes the type checker under the project's configuration (``[tool.mypy]`` in
pyproject.toml: every function annotated, ignores and casts that do nothing refused), so a
plain ``pytest`` holds the line scripts/test.sh draws before its tiers.

scripts/test.sh runs the same ``mypy`` first, with the same configuration and the same cache
(``.mypy_cache``), so here it re-checks only what changed since: seconds. Without that cache
it checks flows/ and every library it imports, a minute or more on one core.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_flows_type_checks_without_an_error() -> None:
    checked = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True,
                             text=True, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "Success: no issues found" in checked.stdout
