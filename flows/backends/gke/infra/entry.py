"""Entry points the rest of the project calls: the infra stage's GKE plan/run, `tpurl plan
--check`, and the stage's chip-hours. Thin on purpose: the logic lives in the modules above.
"""

from __future__ import annotations

from typing import Any

from flows.backends.gke.infra import clients, iam
from flows.backends.gke.infra.cluster import Logger
from flows.backends.gke.infra.commands import deploy_argv, get_credentials_argv, render
from flows.backends.gke.infra.cost import cost_plan, render_cost
from flows.backends.gke.infra.errors import InfraFailed
from flows.backends.gke.infra.provision import InfraReport, preflight, provision
from flows.backends.gke.infra.settings import (
    BLUEPRINT_EXAMPLE,
    CIDR_FIX,
    InfraSettings,
    settings_from_profile,
    world_open_warning,
)
from flows.config.profile import Profile


def _plan_settings(profile: Profile) -> tuple[InfraSettings, list[str]]:
    """Settings for printing a plan; a missing CIDR is shown, not raised (plan is read-only)."""
    try:
        return settings_from_profile(profile), []
    except InfraFailed as exc:
        s = settings_from_profile(profile, require_cidr=False)
        return s, [f"ERROR {exc.diagnosis.summary}; fix: {CIDR_FIX}"]


def gke_plan_actions(profile: Profile) -> list[str]:
    """The infra stage's steps with their exact commands (pure)."""
    s, _ = _plan_settings(profile)
    shown = s if s.authorized_cidr else s.model_copy(update={"authorized_cidr": "<unset>"})
    actions = [
        "pre-flight: APIs, reservation, TPU quota, JobSet/Kueue on an existing cluster, "
        "bucket metadata access (tpurl plan --check)",
        f"create gs://{s.bucket} in {s.region} with uniform bucket-level access (if missing)",
        f"skip the deploy if cluster {s.cluster} exists and its TPU pool matches "
        f"({s.machine_type} {s.topology} x{s.nodepool_count}, reservation {s.reservation})",
        f"fetch Cluster Toolkit {s.cluster_toolkit_version} ({s.bundle_url}; cached, sha256 "
        "recorded)",
        f"edit {BLUEPRINT_EXAMPLE}: storage.admin for node_pool_service_account"
        if s.iam_mode == "project-storage-admin" else
        f"use {BLUEPRINT_EXAMPLE} unedited (iam_mode bucket-scoped)",
        f"restore gs://{s.bucket}/{s.state_prefix}deployment/ (if any), then "
        f"{render(deploy_argv(shown))}, then save the folder there again",
        render(get_credentials_argv(s)),
    ]
    actions += [render(b.argv()) + " (if missing)" for b in iam.desired_bindings(s)]
    actions += [f"gcloud auth configure-docker {r} --quiet (if missing)"
                for r in iam.registries(s)]
    return actions


def gke_plan_notes(profile: Profile) -> list[str]:
    s, errors = _plan_settings(profile)
    notes = list(errors)
    if warning := world_open_warning(s):
        notes.append(warning)
    if s.iam_mode == "project-storage-admin":
        notes.append("iam_mode project-storage-admin (the tutorial's) lets every pod write every "
                     "bucket of the project; gke.iam_mode: bucket-scoped is recommended")
    notes += render_cost(cost_plan(profile))
    return notes


def check_text(profile: Profile) -> tuple[str, bool]:
    """For `tpurl plan PROFILE --check`: (printable report, True when nothing failed)."""
    from flows.backends.gke.infra.preflight import failures, render_checks

    s = settings_from_profile(profile)
    apis, storage_client = clients.default_clients(s)
    results = preflight(s, apis, storage_client)
    return render_checks(results), not failures(results)


def run_gke(profile: Profile, logger: Logger) -> InfraReport:
    """The InfraStage.run gke branch: provision everything, idempotently."""
    s = settings_from_profile(profile)
    apis, storage_client = clients.default_clients(s)
    return provision(s, apis, storage_client, logger)


def report_details(report: InfraReport) -> dict[str, Any]:
    return report.model_dump()


def gke_outputs_present(profile: Profile) -> bool:
    """For InfraStage.outputs_present on GKE: a lineage record alone must not skip the stage
    after a teardown; the cluster must still exist with the profile's TPU pool."""
    from flows.backends.gke.infra.cluster import pool_mismatches

    s = settings_from_profile(profile)
    apis, _ = clients.default_clients(s)
    cluster = apis.get_cluster(s.project, s.region, s.cluster)
    return cluster is not None and not pool_mismatches(cluster, s)


def verify_gke(profile: Profile) -> tuple[dict[str, str], dict[str, Any]]:
    """For InfraStage.verify on GKE: the pool matches and both accounts can read the bucket."""
    from flows.backends.gke.infra.cluster import pool_mismatches
    from flows.backends.gke.infra.errors import user_error
    from flows.backends.gke.infra.preflight import check_bucket_access

    s = settings_from_profile(profile)
    apis, _ = clients.default_clients(s)
    cluster = apis.get_cluster(s.project, s.region, s.cluster)
    problems = pool_mismatches(cluster, s) if cluster is not None else ["no cluster"]
    access = check_bucket_access(s, apis.project_iam_policy(s.project),
                                 apis.bucket_iam_policy(s.bucket), planned=False)
    if problems or access.status == "fail":
        raise user_error("the infrastructure is not what the profile asks for",
                         "; ".join([*problems, access.summary]), access.fix or "rerun the stage")
    return ({"root": f"gs://{s.bucket}", "cluster": f"{s.project}/{s.zone}/{s.cluster}"},
            {"pool_chips": s.total_chips, "iam_mode": s.iam_mode,
             "idle_usd_per_hour": s.total_chips * s.usd_per_chip_hour})
