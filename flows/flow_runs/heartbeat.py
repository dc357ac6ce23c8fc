"""How often a flow run of this product tells Prefect it is alive.

Prefect's flow engine emits a ``prefect.flow-run.heartbeat`` event every
``PREFECT_FLOWS_HEARTBEAT_FREQUENCY`` seconds (default 180) from a thread of the flow's
process, for as long as the run lives (prefect 3.9.1 flow_engine.py ``_send_heartbeats``).
Nothing in the Prefect 3.9.1 server reads them: a run whose process dies is marked Crashed
by its worker when the infrastructure exits (prefect/workers/base.py), and by the heartbeats
only where an automation expects them (Prefect's "zombie flow run" recipe, shipped here as
deployments/automations/crash-silent-runs.yaml). At 180 s they were 20 events an hour of a
run's feed: a run of a few hours was mostly heartbeats, burying the pipeline's own events.

One an hour keeps that detection (the automation marks a silent run Crashed ``ZOMBIE_AFTER_S``
after its last heartbeat: one to two hours after its process died) at one event per hour.
The setting must be in the flow's process before Prefect reads it: the deployments set it in
prefect.yaml (``job_variables.env`` on the process pool, a job variable of its own name on the
Kubernetes pool), `tpurl run` in its own environment (``quiet_heartbeats``);
a value already set wins.
"""

from __future__ import annotations

from collections.abc import MutableMapping

HEARTBEAT_S = 3600
ZOMBIE_AFTER_S = 2 * HEARTBEAT_S  # the automation's window: two beats, one may be late
SETTING = "PREFECT_FLOWS_HEARTBEAT_FREQUENCY"


def quiet_heartbeats(environ: MutableMapping[str, str]) -> None:
    """The product's heartbeat period in ``environ`` unless the operator chose one."""
    environ.setdefault(SETTING, str(HEARTBEAT_S))
