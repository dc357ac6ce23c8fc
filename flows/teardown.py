"""The teardown flow: ``gcluster destroy`` of the pipeline's deployment, the bucket on request.

A Prefect flow (deployable beside rl-post-training) so the clean-up is as visible as the run:
its result lists what was removed and what was kept, and the chip-hours the static TPU pool
held from deploy to destroy. Deleting the bucket needs ``delete_bucket=True`` *and* the
bucket's name again in ``confirm_bucket``; both are checked before anything is touched.
"""

from __future__ import annotations

from prefect import flow, get_run_logger

from flows.backends.gke.infra import clients
from flows.backends.gke.infra.destroy import TeardownReport, teardown
from flows.backends.gke.infra.settings import settings_from_profile
from flows.config import load_profile


@flow(name="teardown", persist_result=True, result_serializer="json", validate_parameters=True)
def teardown_flow(profile: str, overrides: dict[str, str] | None = None,
                  delete_bucket: bool = False, confirm_bucket: str | None = None
                  ) -> TeardownReport:
    """Destroy the cluster of PROFILE (restored from the bucket); keep the bucket unless
    ``delete_bucket`` and ``confirm_bucket`` (its name typed again) are both given."""
    cfg = load_profile(profile, overrides)
    settings = settings_from_profile(cfg)
    apis, storage_client = clients.default_clients(settings)
    report = teardown(settings, apis, storage_client, get_run_logger(),
                      delete_bucket=delete_bucket, confirm_bucket=confirm_bucket)
    print(report.render())
    return report
