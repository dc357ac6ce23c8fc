"""A retrain-like target deployment on the test session's Prefect API, and announcing to it
through the real dispatcher flow (the dispatcher's server tests, tests/announcements/)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta
from uuid import UUID

from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId
from prefect.client.schemas.objects import ConcurrencyLimitStrategy, ConcurrencyOptions

from flows.announcements.dispatch import dispatch_announcement
from flows.common.paths import REPO_ROOT

T0 = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
REV = "0123456789abcdef0123456789abcdef01234567"
ANNOUNCED = REPO_ROOT / ".tpurl" / "announced"  # the rehearsal's allowed prefix


def ds(name: str) -> str:
    """A dataset the rehearsal profile allows (it need not exist to be dispatched)."""
    return f"file://{ANNOUNCED}/{name}"


def make_target(parameters: dict) -> tuple[str, UUID]:
    """A retrain-like deployment (limit 1, ENQUEUE) of the flow rl-post-training."""
    name = f"retrain-{uuid.uuid4().hex[:8]}"
    with get_client(sync_client=True) as client:
        flow_id = client.create_flow_from_name("rl-post-training")
        deployment_id = client.create_deployment(
            flow_id=flow_id, name=name, parameters=parameters,
            concurrency_limit=1, concurrency_options=ConcurrencyOptions(
                collision_strategy=ConcurrencyLimitStrategy.ENQUEUE))
    return f"rl-post-training/{name}", deployment_id


def announce(deployment: str, kind: str, value: str, minute: int,
              event_id: str | None = None) -> tuple[str, dict]:
    event_id = event_id or str(uuid.uuid4())
    return event_id, dispatch_announcement(
        deployment=deployment, kind=kind, value=value, event_id=event_id,
        occurred=str(T0 + timedelta(minutes=minute)))


def runs_of(deployment_id: UUID) -> list:
    with get_client(sync_client=True) as client:
        return client.read_flow_runs(deployment_filter=DeploymentFilter(
            id=DeploymentFilterId(any_=[deployment_id])))


def execute_as_a_worker(run_id: UUID) -> subprocess.Popen[str]:
    """Execute a deployment's run as a process worker does (`python -m prefect.engine` with
    PREFECT__FLOW_RUN_ID: prefect 3.9.1 prefect/workers/process.py), in the checkout."""
    from prefect.settings import PREFECT_API_URL

    env = {**os.environ, "PREFECT_API_URL": str(PREFECT_API_URL.value()),
           "PREFECT__FLOW_RUN_ID": str(run_id)}
    return subprocess.Popen([sys.executable, "-m", "prefect.engine"], cwd=REPO_ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
