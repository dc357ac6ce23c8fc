"""What an unchanged rerun of the rehearsal costs outside its (skipped) stages (issue 20.5).

Usage: python benchmarks/rerun_overhead.py

Measures the pieces a rerun always pays, without the rehearsal venv: `tpurl validate
rehearsal` as a process (interpreter start, imports, profile checks), importing the flow
module, and tpurl's own Prefect API server (start until healthy, then stop). Prints figures.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

TPURL = str(Path(sys.executable).with_name("tpurl"))


def timed(what: str, argv: list[str]) -> float:
    started = time.monotonic()
    subprocess.run(argv, check=True, capture_output=True)
    wall = time.monotonic() - started
    print(f"{what}: {wall:.1f} s")
    return wall


def main() -> None:
    timed("tpurl validate rehearsal (process)", [TPURL, "validate", "rehearsal"])
    timed("python -c 'import flows.pipeline'", [sys.executable, "-c", "import flows.pipeline"])
    code = ("import time; from flows.interrupts import private_api; t=time.monotonic()\n"
            "with private_api(): print(f'up {time.monotonic()-t:.1f} s')\n")
    started = time.monotonic()
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                         text=True, env={k: v for k, v in __import__("os").environ.items()
                                         if k != "PREFECT_API_URL"}).stdout.strip()
    print(f"private API server: {out}, with stop and process {time.monotonic() - started:.1f} s")


if __name__ == "__main__":
    main()
