"""An MLflow client for one server, its token resolved from the profile's reference.

MLflow reads its bearer token from MLFLOW_TRACKING_TOKEN (mlflow/utils/rest_utils.py via
mlflow/tracking/_tracking_service/utils.py ``get_default_host_creds``), so the resolved
value goes there and nowhere else; flows/core/secrets.py registers it for redaction first.
MLflow's own HTTP retries (MLFLOW_HTTP_REQUEST_MAX_RETRIES, 7 by default, backing off for
minutes) are turned down unless the environment sets them: our retries
(flows/integrations/reporting.py) decide how long a report waits, and say so in the log.
"""

from __future__ import annotations

import os
from typing import Any

from flows.config.secret_ref import SecretRef
from flows.core.secrets import resolve

_QUICK = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
          "MLFLOW_HTTP_REQUEST_TIMEOUT": "20"}


def mlflow_client(tracking_uri: str, token: SecretRef | None,
                  project: str | None = None) -> Any:
    """``mlflow.MlflowClient`` for the server; ImportError names the extra to install."""
    try:
        from mlflow import MlflowClient
    except ImportError as exc:
        raise ImportError("the MLflow integration needs the mlflow client: install the "
                          "project with its tracking extra (pip install -e '.[tracking]')"
                          ) from exc
    for name, value in _QUICK.items():
        os.environ.setdefault(name, value)
    if token is not None:
        os.environ["MLFLOW_TRACKING_TOKEN"] = resolve(token, project=project)
    return MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri)
