"""Who is running the flow: the owner of the profile, or a deployment's run.

A flow called in-process (`tpurl run`, `tpurl teardown`, Python) is its caller's: every
override is theirs to make. A run of a deployment was created through the Prefect API (the
run form, `prefect deployment run`, an automation, the announcement dispatcher) by whoever
can reach it, so its ``overrides`` may change only run-tunable fields
(flows/config/run_overrides.py). A flow run no deployment owns cannot be started by a
worker: prefect 3.9.1 prefect/flows.py ``load_flow_from_flow_run`` (line 3248) raises
"Flow run does not have an associated deployment", so the deployment id decides.
"""

from __future__ import annotations

from typing import Any

from prefect.runtime import deployment

from flows.config.loading import Origin


def run_origin() -> Origin:
    """"deployment" inside a deployment's flow run, else "flow" (an in-process call)."""
    return "deployment" if deployment.id else "flow"


def deployed_overrides() -> dict[str, Any]:
    """The ``overrides`` parameter the deployment was created with (prefect.yaml's
    ``parameters``: the deploying operator's, trusted as the profile is), as opposed to the
    run's. Prefect merges a run's parameters over the deployment's when it creates the run
    (a run's ``overrides`` replaces the whole dict), and ``prefect.runtime.deployment
    .parameters`` answers the run's merged ones, so the deployment is read itself."""
    if not deployment.id:
        return {}
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        defaults = client.read_deployment(deployment.id).parameters or {}
    given = defaults.get("overrides")
    return dict(given) if isinstance(given, dict) else {}


def deployed_profile() -> str | None:
    """The ``profile`` parameter the deployment itself was created with (prefect.yaml's, the
    deploying operator's), or None: the one value of a deployment run's ``profile`` that may
    be a path (flows/config/loading.py ``require_profile_name``), as trusted as the file."""
    if not deployment.id:
        return None
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        given = (client.read_deployment(deployment.id).parameters or {}).get("profile")
    return given if isinstance(given, str) else None
