"""A flow run named like the pipeline's that sleeps: ``python -m tests.support.silent_run S``.

For the crash-silent-runs automation's test (tests/test_heartbeat.py): the test kills one
such process to make its run go silent and lets another live. Its Prefect heartbeat period
is whatever PREFECT_FLOWS_HEARTBEAT_FREQUENCY says in its environment. Prints the flow run id
(flushed) as soon as the run starts, then sleeps S seconds or until a line (or the end) comes
on its stdin: the test ends the live run's life once it has seen what it waits for, instead
of sleeping out a length guessed to be long enough.
"""

from __future__ import annotations

import select
import sys

from prefect import flow
from prefect.runtime import flow_run


@flow(name="rl-post-training")
def sleeper(seconds: float) -> None:
    print(flow_run.id, flush=True)
    select.select([sys.stdin], [], [], seconds)


if __name__ == "__main__":
    sleeper(float(sys.argv[1]))
