"""Where the real Google clients are made: the one place tests replace
(tests/backends/gke/infra, with the fakes of tests/fakes/cloud).

Kept apart so the flows import no Google client at module load and a missing credential
fails with a fix instead of a traceback from google.auth.
"""

from __future__ import annotations

from typing import Any

from flows.backends.gke.infra.cloud import GoogleApis
from flows.backends.gke.infra.settings import InfraSettings
from flows.core.failures import user_error


def default_clients(s: InfraSettings) -> tuple[GoogleApis, Any]:
    """(GoogleApis, google.cloud.storage.Client) with Application Default Credentials."""
    try:
        from google.cloud import storage

        from flows.backends.gke.infra.cloud import RestGoogleApis

        return RestGoogleApis(), storage.Client(project=s.gke.project)
    except ImportError as exc:
        raise user_error("infra", "google-cloud-storage is not installed", str(exc),
                         "pip install 'tpu-rl-pipeline[gcp]'") from None
    except Exception as exc:  # google.auth.exceptions.DefaultCredentialsError and kin
        raise user_error("infra", "no Google credentials for the infra stage", str(exc)[:300],
                         "run `gcloud auth application-default login`, or give the flow's "
                         "pod a Workload Identity service account") from None
