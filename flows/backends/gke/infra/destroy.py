"""Tear down what the infra stage made: ``gcluster destroy`` of the same deployment, and the
bucket only when asked twice.

Why the bucket needs its name typed again: it holds the checkpoints, the exported model and
the deployment's Terraform state; deleting it is the one irreversible step, so a boolean
alone (easy to template into a deployment by mistake) is not enough. The confirmation is
checked before anything is touched. The bucket is never deleted when the destroy failed: the
state needed to retry the destroy lives in it.
"""

from __future__ import annotations

import shutil
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, Field

from flows.backends.gke.infra import bucket as gcs
from flows.backends.gke.infra.cloud import GoogleApis
from flows.backends.gke.infra.cluster import planned_slots, restore_deployment, save_deployment, tpu_pools
from flows.backends.gke.infra.commands import destroy_argv, render, run
from flows.backends.gke.infra.cost import pool_chip_hours_since
from flows.backends.gke.infra.settings import InfraSettings
from flows.config.capacity import SCALE_FROM_ZERO, price_for, reservation_kept
from flows.core.backend import StageLogger
from flows.core.failures import infrastructure, user_error


class TeardownReport(BaseModel):
    cluster: str
    removed: list[str] = Field(default_factory=list)
    kept: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    pool_chip_hours: float | None = None
    pool_usd: float | None = None

    def render(self) -> str:
        lines = [f"teardown of {self.cluster}"]
        lines += [f"  removed  {item}" for item in self.removed]
        lines += [f"  kept     {item}" for item in self.kept]
        if self.pool_chip_hours is not None:
            lines.append(f"  the TPU pool held {self.pool_chip_hours:,.1f} chip-hours "
                         f"(≈ ${self.pool_usd or 0:,.2f}) from deploy to destroy")
        lines += [f"  note     {note}" for note in self.notes]
        return "\n".join(lines)


def confirmation_problem(s: InfraSettings, delete_bucket: bool, confirm_bucket: str | None
                         ) -> str | None:
    """Pure: why a bucket deletion request is not confirmed (None: it is, or none asked)."""
    if not delete_bucket:
        return None
    if not confirm_bucket:
        return f"deleting gs://{s.gke.bucket} needs its name typed again (confirm_bucket)"
    if confirm_bucket.strip().removeprefix("gs://").rstrip("/") != s.gke.bucket:
        return f"confirm_bucket {confirm_bucket!r} does not match gke.bucket {s.gke.bucket!r}"
    return None


def foreign_tpu_pools(cluster: dict[str, Any] | None, s: InfraSettings,
                      meta: dict[str, Any] | None) -> list[str]:
    """Pure: the cluster's TPU node pools tpurl did not create: neither recorded by a deploy
    (deployment.json ``tpu_pools``) nor planned for the profile now (a deploy that stopped
    half-way may have made them before it could record them). ``gcluster destroy`` deletes
    the cluster with every pool in it, so these would be deleted too."""
    known = {*((meta or {}).get("tpu_pools") or []), *(name for name, _ in planned_slots(s))}
    return [str(p.get("name")) for p in tpu_pools(cluster or {}, s) if p.get("name") not in known]


def teardown(s: InfraSettings, apis: GoogleApis, client: Any, logger: StageLogger,
             delete_bucket: bool = False, confirm_bucket: str | None = None) -> TeardownReport:
    if problem := confirmation_problem(s, delete_bucket, confirm_bucket):
        raise user_error("infra", problem + "; nothing was removed", f"gke.bucket is {s.gke.bucket}",
                         f"pass delete_bucket=True and confirm_bucket={s.gke.bucket} "
                         f"(`tpurl teardown PROFILE --delete-bucket --confirm-bucket {s.gke.bucket}`), "
                         "or keep it")
    report = TeardownReport(cluster=f"{s.gke.project}/{s.gke.region}/{s.gke.cluster}")
    bucket_exists = client.lookup_bucket(s.gke.bucket) is not None
    cluster = apis.get_cluster(s.gke.project, s.gke.region, s.gke.cluster)
    have_state = (bucket_exists and restore_deployment(client, s)) or s.deployment_dir.is_dir()
    meta = gcs.read_json(client, s.gke.bucket, s.state_prefix + "deployment.json") \
        if bucket_exists else None
    if have_state and (foreign := foreign_tpu_pools(cluster, s, meta)):
        raise user_error("infra", f"cluster {s.gke.cluster} holds TPU node pool(s) tpurl did "
                         f"not create: {', '.join(foreign)}; destroying the cluster would "
                         "delete them too, so nothing was removed",
                         "not in the deployment record (gs://"
                         f"{s.gke.bucket}/{s.state_prefix}deployment.json tpu_pools) nor "
                         "planned for the profile's gke.capacity and gke.zones",
                         "move their work elsewhere and delete them yourself ("
                         + "; ".join(f"gcloud container node-pools delete {name} --cluster="
                                     f"{s.gke.cluster} --location={s.gke.region} --project="
                                     f"{s.gke.project}" for name in foreign)
                         + "), then rerun teardown")
    if have_state:
        _destroy(s, client, bucket_exists, report, logger)
    elif cluster is not None:
        raise user_error("infra", f"cluster {s.gke.cluster} exists but no deployment folder was found",
                         f"nothing under gs://{s.gke.bucket}/{s.state_prefix}deployment/ nor in "
                         f"{s.deployment_dir}", "it was not deployed by tpurl: delete it "
                         f"yourself (gcloud container clusters delete {s.gke.cluster} "
                         f"--region={s.gke.region}); the bucket was left alone")
    else:
        report.notes.append(f"no cluster {s.gke.cluster} and no deployment folder: nothing to destroy")

    if delete_bucket and bucket_exists:
        count = gcs.delete_bucket(client, s.gke.bucket)
        report.removed.append(f"gs://{s.gke.bucket} ({count} objects, the deployment record included)")
    elif bucket_exists:
        report.kept.append(f"gs://{s.gke.bucket}: checkpoints, exports and the deployment record "
                           f"(to remove: --delete-bucket --confirm-bucket {s.gke.bucket})")
    logger.info(report.render())
    return report


def _destroy(s: InfraSettings, client: Any, bucket_exists: bool, report: TeardownReport,
             logger: StageLogger) -> None:
    from flows.backends.gke.infra.bundle import obtain_bundle

    bundle = obtain_bundle(s)
    argv = destroy_argv(s, str(bundle.gcluster))
    log = s.workdir / "logs" / f"destroy-{datetime.now(UTC):%Y%m%d-%H%M%S}.log"
    logger.info("destroying deployment %s: %s", s.gke.cluster, render(argv))
    result = run(argv, cwd=s.workdir, log=log)
    meta = gcs.read_json(client, s.gke.bucket, s.state_prefix + "deployment.json") if bucket_exists \
        else None
    if not result.ok:
        if bucket_exists:
            save_deployment(client, s, {"last_destroy_ok": False})
        hint = ("the blueprint's own buckets are not force-destroyed: empty them, then rerun"
                if "not empty" in result.tail_text().lower() or "force_destroy" in
                result.tail_text() else "rerun teardown; the state is kept")
        raise infrastructure("infra", "gcluster destroy failed; the bucket was not touched",
                        f"{result.tail_text()}\n    full log: {log}", hint)
    report.removed.append(f"cluster {s.gke.cluster}, its TPU and CPU node pools, networks and "
                          "service accounts (gcluster destroy)")
    now = datetime.now(UTC)
    # the mode the cluster was deployed in (the record's; older records lack it: the
    # profile's), not the profile's now: after a switch of gke.capacity without a run, the
    # pool destroyed here is the old mode's
    deployed_as = str((meta or {}).get("capacity") or s.gke.capacity_chain[0])
    if meta and meta.get("deployed_at") and deployed_as not in SCALE_FROM_ZERO:
        # a pool that scales from zero billed only while training: the runs' results say how
        # much; the static pool billed every hour since deploy
        report.pool_chip_hours = pool_chip_hours_since(meta["deployed_at"], now, s.gke.total_chips)
        report.pool_usd = (report.pool_chip_hours
                           * price_for(s.gke.prices, deployed_as)[0].usd_per_chip_hour)
    if s.gke.reservation:
        report.kept.append(reservation_kept(s.gke.reservation, s.gke.zone, s.gke.project,
                                            s.gke.total_chips * s.gke.usd_per_chip_hour))
    if bucket_exists:
        save_deployment(client, s, {"destroyed_at": now.isoformat(), "last_destroy_ok": True,
                                    "deployed_at": None})
        report.kept.append(f"gs://{s.gke.bucket}/{s.state_prefix} (the destroyed deployment's "
                           "record; a later run deploys afresh from it)")
    shutil.rmtree(s.workdir, ignore_errors=True)
    report.removed.append(f"local working folder {s.workdir}")
