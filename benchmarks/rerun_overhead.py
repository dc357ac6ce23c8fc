"""What an unchanged rerun of the rehearsal costs outside its (skipped) stages.

Usage: python benchmarks/rerun_overhead.py [--repeat N] [--quick]

The last rows start `tpurl run` with the API server kept between commands, as when the user
asks for one (flows/console/kept_api.py), first starting it, then finding it running. An
unchanged rerun starts none (flows/console/finished.py).

Measures the pieces a rerun always pays, without the rehearsal venv: `tpurl validate
rehearsal` as a process, importing the flow module, tpurl's own Prefect API server (start
until healthy) with Prefect's defaults and with tpurl's ``SERVER_ENV``, and the start as
`tpurl run` does it (the flow module imported while the server boots). Each figure is wall
time and CPU time (user + system): on a loaded machine the wall time grows with the load,
the CPU time much less, so the CPU time is what a quiet machine's wall time comes near (one
process on one core). The load average is printed beside each figure.
``--quick`` measures `tpurl validate`, `tpurl run`'s start and the kept server twice
(started, then found), without the import and the server-alone rows. Exits 1 when a later command did
not find the kept server its first one started (another URL); prints figures only.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TPURL = str(Path(sys.executable).with_name("tpurl"))
ENV = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
ENV.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
ENV["TPURL_KEEP_API_S"] = "0"  # the rows below measure a server per command; KEPT the kept one

# In a child: `tpurl run`'s start with the kept server (flows/console/kept_api.py), the flow imported
# meanwhile; prints the wall time until the API answers with the flow imported.
KEPT = """
import time
t = time.monotonic()
from flows.console import interrupts
with interrupts.private_api(while_starting=lambda: __import__("flows.pipeline")) as url:
    print(f"{time.monotonic() - t:.1f} {url}")
"""

# In a child: start the server as tpurl does (or with Prefect's defaults), report the wall
# time to healthy and the server process's own CPU seconds at that moment.
SERVER = """
import os, sys, time
t = time.monotonic()
from flows.console import api_server, interrupts
if sys.argv[1] == "defaults":
    api_server.SERVER_ENV = {}
work = (lambda: __import__("flows.pipeline")) if sys.argv[2] == "overlap" else None
seen = []
launch = api_server.ApiServer._launch
api_server.ApiServer._launch = lambda self: seen.append(self) or launch(self)
with interrupts.private_api(while_starting=work):
    wall = time.monotonic() - t
    fields = open(f"/proc/{seen[-1].process.pid}/stat").read().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    print(f"{wall:.1f} {cpu:.1f}")
"""


def _cpu_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(what: str, argv: list[str]) -> str:
    before, started = _cpu_children(), time.monotonic()
    out = subprocess.run(argv, check=True, capture_output=True, text=True, env=ENV).stdout
    wall, cpu = time.monotonic() - started, _cpu_children() - before
    print(f"{what}: wall {wall:.1f} s, CPU {cpu:.1f} s (load {os.getloadavg()[0]:.1f})",
          flush=True)
    return out.strip()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--quick", action="store_true",
                        help="tpurl validate, tpurl run's start, the kept server twice (the "
                             "tests' run)")
    args = parser.parse_args()
    reused = True
    for _ in range(args.repeat):
        timed("tpurl validate rehearsal (process)", [TPURL, "validate", "rehearsal"])
        if not args.quick:
            timed("python -c 'import flows.pipeline'", [sys.executable, "-c",
                                                        "import flows.pipeline"])
        for env in () if args.quick else ("defaults", "tpurl"):
            out = timed(f"API server, {env} env (this process: start, stop)",
                        [sys.executable, "-c", SERVER, env, "alone"])
            wall, cpu = out.split()
            print(f"    to healthy: wall {wall} s; the server process's CPU {cpu} s")
        out = timed("tpurl run's start: server boots while the flow imports",
                    [sys.executable, "-c", SERVER, "tpurl", "overlap"])
        per_command = float(out.split()[0])
        print(f"    to healthy with the flow imported: wall {per_command} s")
        reused = kept_rows(per_command, attempts=2 if args.quick else 3) and reused
    if not reused:
        print("a later command did not find the kept server the first one started")
    return 0 if reused else 1


def kept_rows(per_command: float, attempts: int = 3) -> bool:
    """The kept server: the first command starts it, the next ones find it running (whether
    they all used one server's URL)."""
    with tempfile.TemporaryDirectory() as scratch:
        kept_env = {**ENV, "TPURL_KEEP_API_S": "600", "TPURL_CACHE_DIR": f"{scratch}/cache",
                    "PREFECT_HOME": f"{scratch}/home"}
        try:
            urls = set()
            for attempt in ("first (starts the kept server)", "second (reuses it)",
                            "third (reuses it)")[:attempts]:
                before, started = _cpu_children(), time.monotonic()
                out = subprocess.run([sys.executable, "-c", KEPT], check=True,
                                     capture_output=True, text=True, env=kept_env).stdout
                wall, cpu = time.monotonic() - started, _cpu_children() - before
                ready, url = out.strip().splitlines()[-1].split()
                urls.add(url)
                print(f"tpurl run's start, kept server, {attempt}: wall {wall:.1f} s, CPU "
                      f"{cpu:.1f} s, to ready {ready} s; ratio to a server per command "
                      f"{float(ready) / per_command:.2f} (load {os.getloadavg()[0]:.1f})",
                      flush=True)
            return len(urls) == 1
        finally:
            subprocess.run([TPURL, "api-server", "stop"], env=kept_env, capture_output=True)


if __name__ == "__main__":
    raise SystemExit(main())
