"""Before the first stage: each integration the profile names can be reached and has its
credentials, or the run is refused with the field and the fix (validated at load,
before any side effect). A tracker that goes down later is only a warning (reporting.py);
one that cannot be reached at the start is a mistake in the profile or the network, and
finding out after hours of training would lose the report for nothing.
"""

from __future__ import annotations

import os
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping

from flows.common.failure_codes import Failure
from flows.common.issues import Issue
from flows.config.profile import Profile
from flows.config.secret_ref import SecretRef
from flows.config.wandb_key import wandb_key_problem
from flows.core.secrets import SecretUnavailable, pod_secret_fix, resolve

TIMEOUT_S = 10.0


def integration_issues(profile: Profile, environ: Mapping[str, str] | None = None) -> list[Issue]:
    """Every problem of the profile's integrations; values read and dropped, never kept."""
    issues: list[Issue] = []
    project = profile.gke.project if profile.gke else None
    tracking = profile.tracking
    servers: list[tuple[str, str, SecretRef | None]] = []
    if tracking.mlflow is not None:
        servers.append(("tracking.mlflow", tracking.mlflow.tracking_uri, tracking.mlflow.token))
    if tracking.wandb is not None and tracking.wandb.api_key is not None:
        issues += _secret("tracking.wandb.api_key", tracking.wandb.api_key, environ, project,
                          _wandb_key_shape)
    rule = profile.promotion_rule
    register = rule.register if rule is not None else None
    if register is not None and register.mlflow is not None:
        servers.append(("promotion.register.mlflow", register.mlflow.tracking_uri,
                        register.mlflow.token))
    if register is not None and register.hub is not None:
        issues += _secret("promotion.register.hub.token", register.hub.token, environ, project)
    if tracking.tensorboard is not None and tracking.tensorboard.vertex_tensorboard:
        issues += _google_credentials("tracking.tensorboard.vertex_tensorboard")
    if register is not None and register.vertex is not None:
        issues += _google_credentials("promotion.register.vertex")
    for field, uri, token in servers:
        issues += _secret(f"{field}.token", token, environ, project) if token else []
        if problem := unreachable(uri):
            issues.append(Issue(f"{field}.tracking_uri", f"{uri} does not answer: {problem}",
                                "start the MLflow server or correct the address (it must be "
                                "reachable from where the flow runs), or remove the section",
                                Failure.CONFIG_INTEGRATION_UNREACHABLE))
    return issues


def unreachable(uri: str) -> str | None:
    """None when an HTTP server answers at ``uri`` (any status: a 401 is a server that
    asks for the token, which the token check covers); else why not."""
    try:
        with urllib.request.urlopen(f"{uri}/health", timeout=TIMEOUT_S):
            return None
    except urllib.error.HTTPError:
        return None
    except (OSError, ValueError) as exc:
        return f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}"


def _secret(field: str, ref: SecretRef, environ: Mapping[str, str] | None,
            project: str | None,
            shape: Callable[[SecretRef, str], Issue | None] | None = None) -> list[Issue]:
    try:
        value = resolve(ref, environ, project)
    except SecretUnavailable as exc:
        env = os.environ if environ is None else environ
        return [Issue(field, f"{ref.describe()} is not available where the flow runs",
                      pod_secret_fix(ref, field, env) or str(exc), exc.category)]
    found = shape(ref, value) if shape is not None else None
    return [Issue(field, found.problem, found.fix, found.category)] if found else []


def _wandb_key_shape(ref: SecretRef, value: str) -> Issue | None:
    """A value wandb would refuse at ``wandb.init``, in the training program, hours in."""
    if (problem := wandb_key_problem(value)) is None:  # wandb reads it as it is
        return None
    return Issue("", f"{ref.describe()} does not hold a W&B API key wandb accepts: {problem}",
                 "put the key from wandb.ai/authorize there as it is (a current key starts "
                 "wandb_v1_ and has 86 characters, a legacy one 40 hex digits, an on-prem "
                 "server's a prefix such as local-)", Failure.CONFIG_SECRET_INVALID)


def _google_credentials(field: str) -> list[Issue]:
    try:
        import google.auth

        google.auth.default(scopes=["https://www.googleapis.com/auth/cloud-platform"])
    except Exception as exc:  # no ADC, no library: the registry could not be reached
        return [Issue(field, f"no Google credentials where the flow runs ({type(exc).__name__})",
                      "run `gcloud auth application-default login`, or give the flow's service "
                      "account roles/aiplatform.user", Failure.CONFIG_SECRET_UNAVAILABLE)]
    return []
