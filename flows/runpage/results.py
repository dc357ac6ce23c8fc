"""Where results live: beside the outputs, in the profile's bucket (or directory).

Two records, for two readers:
- our own ``tpurl-results/<profile>/<run>.json`` (+ ``latest.json``) written through the same
  Storage as the outputs, so any worker, a notebook or `gcloud storage cat` finds the last
  result of a profile without the Prefect database;
- Prefect's persisted flow result, which on GCP goes to a prefect-gcp ``GcsBucket`` block in
  the same bucket (``ensure_gcs_result_storage``), named in the work pool's environment as
  PREFECT_RESULTS_DEFAULT_STORAGE_BLOCK=gcs-bucket/<name>.
"""

from __future__ import annotations

from flows.config.profile import Profile
from flows.core.layout import Layout
from flows.core.storage import Storage, join
from flows.runpage.result import PipelineResult

RESULT_BLOCK = "tpurl-results"
RESULT_FOLDER = "tpurl/prefect-results"


def result_uris(profile: Profile, run_name: str) -> tuple[str, str]:
    base = join(Layout(profile).root, "tpurl-results", profile.name)
    return join(base, f"{run_name}.json"), join(base, "latest.json")


def persist_result(storage: Storage, profile: Profile, run_name: str,
                   result: PipelineResult) -> str:
    run_uri, latest_uri = result_uris(profile, run_name)
    text = result.model_dump_json(indent=2)
    storage.write_text(run_uri, text)
    storage.write_text(latest_uri, text)
    return run_uri


def ensure_gcs_result_storage(profile: Profile, block_name: str = RESULT_BLOCK,
                              credentials_block: str | None = None) -> str:
    """Create or update the GcsBucket block for Prefect's results; return its slug."""
    from prefect_gcp import GcpCredentials, GcsBucket

    assert profile.gke is not None, "Prefect result storage in GCS is for GKE profiles"
    name = credentials_block or profile.gke.gcp_credentials_block
    credentials = GcpCredentials.load(name) if name else GcpCredentials(project=profile.gke.project)
    GcsBucket(bucket=profile.gke.bucket, bucket_folder=RESULT_FOLDER,
              gcp_credentials=credentials).save(block_name, overwrite=True)
    return f"gcs-bucket/{block_name}"
