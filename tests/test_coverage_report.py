"""scripts/coverage_report.py: the functions no test ran, measured by a real coverage run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from scripts.coverage_report import never_executed, per_package, render


def _measure(tmp_path: Path) -> dict:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "mod.py").write_text(
        "def used():\n    return 1\n\n\ndef unused():\n    return 2\n\n\n"
        "class Thing:\n    def method(self):\n        return 3\n\n\nused()\n")
    (tmp_path / "main.py").write_text("import pkg.mod\n")
    run = [sys.executable, "-m", "coverage"]
    subprocess.run([*run, "run", "--source=pkg", "main.py"], cwd=tmp_path, check=True)
    subprocess.run([*run, "json", "-q", "-o", "cov.json"], cwd=tmp_path, check=True)
    return json.loads((tmp_path / "cov.json").read_text())


def test_lists_exactly_the_functions_that_never_ran(tmp_path: Path):
    report = _measure(tmp_path)
    assert never_executed(report) == ["pkg/mod.py:5 unused", "pkg/mod.py:10 Thing.method"]
    covered, statements = per_package(report)["pkg"]
    assert statements == 8 and covered == 6  # defs, the class body and used() ran
    text = render(report)
    assert "functions no test executed (2):" in text and "pkg/mod.py:5 unused" in text
