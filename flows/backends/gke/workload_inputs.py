"""What a Workload needs in the namespace before its JobSet is created: a Secret per secret
environment variable (its value read from the profile's reference and registered with the
Redactor first) and the ConfigMap of the programs it ships. Both are idempotent: a rerun
updates the Secret and finds the content-named ConfigMap already there.

Apart from backend.py, which calls them once per submission, because they are a job of
their own: turning references into cluster objects, never the JobSet's life.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kubernetes.client.exceptions import ApiException

from flows.backends.gke.jobs.program_files import program_files_configmap
from flows.backends.gke.jobs.secret_objects import secret_with_value
from flows.core.failures import Diagnosis, FailureCategory, StageFailed
from flows.core.secrets import SecretTooShort, SecretUnavailable, resolve
from flows.core.workload import Workload

if TYPE_CHECKING:
    from flows.backends.gke.backend import GkeBackend


def apply_secrets(backend: GkeBackend, workload: Workload) -> None:
    """Create or update the Secret of each secret env var, from its reference."""
    core, ns = backend.cluster.core, backend.profile.gke.namespace
    for _, ref in workload.secret_env:
        try:
            value = resolve(ref, project=backend.profile.gke.project if backend.profile.gke else None)
        except SecretUnavailable as exc:
            raise StageFailed(backend.stage, Diagnosis(
                FailureCategory.USER_ERROR, f"the secret {ref.describe()} is "
                f"{'not a usable token' if isinstance(exc, SecretTooShort) else 'unavailable'}",
                f"    {exc}", "set it, then run again; nothing was submitted")) from None
        backend.redactor.add(value)
        body = secret_with_value(ref, ns, value, backend.options.hf_token_key)
        name = body["metadata"]["name"]
        try:
            backend._call(f"create Secret {name}", core.create_namespaced_secret, ns, body)
        except ApiException as exc:
            if exc.status != 409:
                raise backend._api_failure(f"create Secret {name}", exc) from None
            backend._call(f"update Secret {name}", core.replace_namespaced_secret, name, ns,
                       body)
        backend.logger.info("Secret %s holds %s (value not shown)", name, ref.describe())

def ship_programs(backend: GkeBackend, workload: Workload) -> None:
    """Create the ConfigMap of the programs the workload ships (flows/backends/gke/jobs/
    program_files.py). Named by content and immutable: a 409 means these bytes are there."""
    if not workload.files:
        return
    ns = backend.profile.gke.namespace
    body = program_files_configmap(workload.files, ns)
    name = body["metadata"]["name"]
    try:
        backend._call(f"create ConfigMap {name}", backend.cluster.core.create_namespaced_config_map,
                   ns, body)
    except ApiException as exc:
        if exc.status != 409:
            raise backend._api_failure(f"create ConfigMap {name}", exc) from None
    backend.logger.info("ConfigMap %s holds %s, mounted at /tpurl/programs", name,
                     ", ".join(f"{f.name} ({f.digest})" for f in workload.files))
