"""A program the interrupt tests run: `tpurl run`'s shutdown machinery (flows/interrupts.py)
around a real flow whose task runs a real child through the LocalBackend, holding the
profile's lock. Prints `CHILD <pid>` and `SERVER <url>` once the child runs.

    python -m tests.support.interrupt_probe ROOT
"""

from __future__ import annotations

import logging
import sys

from prefect import flow, task


@task
def long_program(root: str) -> None:
    from flows.backends import backend_for
    from flows.config import load_profile
    from flows.core.storage import file_uri

    backend = backend_for(load_profile("rehearsal", {"local.root": root}, environ={}),
                          logger=logging.getLogger("probe"), stage="train")
    code = "import os, time\nprint('CHILD', os.getpid(), flush=True)\ntime.sleep(600)"
    backend.run_command("probe", [sys.executable, "-u", "-c", code],  # type: ignore[attr-defined]
                        file_uri(f"{root}/tpurl-logs/probe.log"))


@flow
def probe_flow(root: str) -> None:
    from flows.profile_lock import profile_lock

    with profile_lock("interrupt-probe", logging.getLogger("probe")):
        long_program(root)


def main() -> int:
    from flows.interrupts import Interrupted, install_handlers, private_api

    install_handlers()
    try:
        with private_api() as url:
            print("SERVER", url, flush=True)
            probe_flow(sys.argv[1])
    except Interrupted as exc:
        print("INTERRUPTED", exc.signum, flush=True)
        return 128 + exc.signum
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, stream=sys.stdout)
    raise SystemExit(main())
