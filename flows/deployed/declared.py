"""What a deployment itself declares (prefect.yaml's ``parameters`` and ``job_variables``),
read through the Prefect API inside one of its runs.

The deployment's owner wrote them, as trusted as the profile; a run of it was created by
whoever can reach the API. Prefect merges a run's parameters over the deployment's when it
creates the run (a run's ``overrides`` replaces the whole dict), and
``prefect.runtime.deployment.parameters`` answers the merged ones; a worker lays a run's job
variables over the deployment's (prefect 3.9.1 prefect/workers/base.py ``_get_configuration``:
the run's ``env`` keys over the deployment's, any other variable replaced). So the
deployment is read itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from prefect.runtime import deployment

# A job variable named as an environment variable (upper case) is one on the Kubernetes pool;
# Prefect's own variables (env, image, labels, stream_output) are lower case.
ENV_NAME = re.compile(r"[A-Z][A-Z0-9_]*")


@dataclass(frozen=True)
class Declared:
    """What the deployment itself was created with (prefect.yaml's ``parameters`` and
    ``job_variables``, by whoever deploys: as trusted as the profile), as opposed to what a
    run of it was given. Empty outside a deployment's run."""

    parameters: dict[str, Any] = field(default_factory=dict)
    job_variables: dict[str, Any] = field(default_factory=dict)

    @property
    def overrides(self) -> dict[str, Any]:
        return declared_overrides(self.parameters)

    @property
    def profile(self) -> str | None:
        """The ``profile`` the deployment declares: the one value of a run's ``profile``
        that may be a path (flows/config/loading.py ``require_profile_name``)."""
        return declared_profile(self.parameters)

    @property
    def env(self) -> dict[str, Any]:
        """The environment variables the deployment sets for its flow: on the process pool
        its ``env`` variable; on the Kubernetes pool one variable per name, named as the
        environment variable (deployments/work-pool/kubernetes-base-job-template.json, whose
        job configuration has no ``env`` a run could add a name to)."""
        return declared_env(self.job_variables)


# The properties' answers as plain functions: one reading per field, and mutation testing
# (scripts/mutation.py) mutates functions, never a property.
def declared_overrides(parameters: dict[str, Any]) -> dict[str, Any]:
    """The deployment's ``overrides`` (a copy), or none when it declares no dict."""
    given = parameters.get("overrides")
    return dict(given) if isinstance(given, dict) else {}


def declared_profile(parameters: dict[str, Any]) -> str | None:
    given = parameters.get("profile")
    return given if isinstance(given, str) else None


def declared_env(job_variables: dict[str, Any]) -> dict[str, Any]:
    """The ``env`` variable's entries over the upper-case variables of the same names."""
    given = job_variables.get("env")
    named = {name: value for name, value in job_variables.items() if ENV_NAME.fullmatch(name)}
    return {**named, **(given if isinstance(given, dict) else {})}


def deployment_declared() -> Declared:
    """The running deployment's declarations; empty outside a deployment's run."""
    if not deployment.id:
        return Declared()
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        read = client.read_deployment(deployment.id)
    return Declared(dict(read.parameters or {}), dict(read.job_variables or {}))
