"""The infra stage on GKE, end to end: pre-flight → bucket → cluster → IAM → docker auth.

Order matters. Pre-flight first, because it spends nothing; the bucket next, because it holds
the deployment folder (Terraform state) that the deploy keeps there; IAM after the deploy,
because the blueprint creates the service accounts being granted. Every step reads before it
writes, so a second run on a finished cluster runs no gcluster and no gcloud command at all.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from flows.backends.gke.iam_propagation import Grant, grants_path
from flows.backends.gke.iam_propagation import record as record_grants
from flows.backends.gke.infra import cluster as gke
from flows.backends.gke.infra import iam
from flows.backends.gke.infra.bucket import ensure_bucket
from flows.backends.gke.infra.cloud import GoogleApis
from flows.backends.gke.infra.commands import get_credentials_argv, render, require_executable, run
from flows.backends.gke.infra.preflight.access import Planned
from flows.backends.gke.infra.preflight.checks import (
    CheckResult,
    check_bucket_access,
    failures,
    gather,
    render_checks,
    run_checks,
)
from flows.backends.gke.infra.preflight.team_queues import FAIR_SHARING_FIX
from flows.backends.gke.infra.settings import BLUEPRINT_FILE, InfraSettings, world_open_warning
from flows.core.backend import StageLogger
from flows.core.failures import infrastructure, user_error


class InfraReport(BaseModel):
    """What the infra stage found and did; goes into the stage's lineage details."""

    cluster: str
    bucket_created: bool
    deployed: bool
    deploy_skipped_reason: str = ""
    granted: list[str] = Field(default_factory=list)
    docker_registries: list[str] = Field(default_factory=list)
    checks: list[dict[str, str]] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    pool_chips: int = 0
    idle_usd_per_hour: float = 0.0


def preflight(s: InfraSettings, apis: GoogleApis, client: Any,
              planned: Planned | None = None) -> list[CheckResult]:
    """The checks ``tpurl plan --check`` prints; reads only."""
    try:
        exists = client.lookup_bucket(s.gke.bucket) is not None
    except Exception:
        exists = False
    return run_checks(s, gather(apis, s, bucket_exists=exists, planned=planned), planned)


def _run_ok(argv: list[str], s: InfraSettings, what: str) -> None:
    result = run(argv, log=s.workdir / "logs" / "gcloud.log")
    if not result.ok:
        raise infrastructure("infra", f"{what} failed", f"$ {render(argv)}\n{result.tail_text()}",
                        "retried automatically; if it keeps failing, run the command by hand "
                        "and read its message")


def provision(s: InfraSettings, apis: GoogleApis, client: Any, logger: StageLogger,
              kubeconfig: Path | None = None, docker_config: Path | None = None,
              planned: Planned | None = None) -> InfraReport:
    report = InfraReport(cluster=f"{s.gke.project}/{s.gke.region}/{s.gke.cluster}", bucket_created=False,
                         deployed=False, pool_chips=s.gke.total_chips,
                         idle_usd_per_hour=s.gke.idle_usd_per_hour)
    if warning := world_open_warning(s.gke):
        logger.warning(warning)
        report.warnings.append(warning)
    checks = preflight(s, apis, client, planned)
    report.checks = [{"name": c.name, "status": c.status, "summary": c.issue.problem,
                      "fix": c.issue.fix}
                     for c in checks]
    for check in checks:
        (logger.info if check.status == "ok" else logger.warning)(check.render())
    # A live ClusterQueue that does not admit our pods is what the deploy fixes (it re-applies
    # the blueprint with tpurl's Kueue configuration), so it does not block the deploy.
    stale_kueue = [c for c in checks if c.name == "kueue-admission" and c.status == "fail"
                   and not c.issue.problem.startswith("(to be deployed)")]
    if [c for c in failures(checks) if c not in stale_kueue]:
        raise user_error("infra", "pre-flight checks failed; nothing was created",
                         render_checks(checks), "apply each fix shown, then rerun")
    require_executable("gcloud")
    s.workdir.mkdir(parents=True, exist_ok=True)

    project_number = apis.project_number(s.gke.project)
    s = s.model_copy(update={"project_number": project_number})  # the team principal's
    bucket = ensure_bucket(client, s, project_number)
    report.bucket_created = bucket.created
    report.warnings += bucket.warnings
    logger.info("bucket gs://%s %s (%s)", s.gke.bucket, "created" if bucket.created else "kept",
                bucket.location)

    current = apis.get_cluster(s.gke.project, s.gke.region, s.gke.cluster)
    if current is not None and (unlabelled := gke.unlabelled_pools(current, s)):
        raise user_error("infra", "a TPU pool lacks its capacity label, which re-applying "
                         "the blueprint cannot add; nothing was deployed",
                         "; ".join(why for why, _ in unlabelled),
                         "add the label in place (the pool and its nodes stay): "
                         + "; ".join(cmd for _, cmd in unlabelled) + "; then rerun")
    mismatches = gke.pool_mismatches(current, s) if current is not None else ["no cluster"]
    mismatches += [f"Kueue does not admit the pipeline's pods ({c.issue.problem})"
                   for c in stale_kueue]
    # Kueue's live configuration without the fair sharing the deploy's chart values set: a
    # cluster deployed before (decision 0041), whose next deploy reinstalls Kueue
    if current is not None and any(c.name == "team-queues" and c.status == "warn"
                                   and FAIR_SHARING_FIX in c.issue.fix for c in checks):
        try:
            running = apis.admitted_workloads(current)
        except Exception as exc:  # unread is not idle: what it would stop is unknown
            running = [f"(unknown: Kueue's workloads could not be read: "
                       f"{str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__})"]
        mismatches = _reinstalling_kueue(s, running, mismatches, report, logger)
    terraform_grants: list[Grant] = []  # a deploy's Terraform bindings, new to IAM
    if not mismatches:
        report.deploy_skipped_reason = "cluster exists and its TPU pool matches the profile"
        logger.info("cluster %s: %s; not deploying", s.gke.cluster, report.deploy_skipped_reason)
    else:
        _refuse_taking_others_pools(s, current, client, logger)
        _deploy(s, apis, client, current, mismatches, logger)
        report.deployed = True
        terraform_grants = _blueprint_grants(s)
        if planned is not None and planned.pod_sets:
            _require_admission(s, apis, client, planned)

    kubeconfig = kubeconfig or Path(os.environ.get("KUBECONFIG", "~/.kube/config")).expanduser()
    if report.deployed or not gke.has_kube_context(s, kubeconfig):
        _run_ok(get_credentials_argv(s), s, "gcloud container clusters get-credentials")

    project_policy = apis.project_iam_policy(s.gke.project)
    bucket_policy = apis.bucket_iam_policy(s.gke.bucket)
    fresh: list[Grant] = list(terraform_grants)
    for binding in iam.missing_bindings(iam.desired_bindings(s), project_policy, bucket_policy):
        _run_ok(binding.argv(), s, f"granting {binding.role} to {binding.member}")
        report.granted.append(f"{binding.role} on {binding.scope} {binding.resource} to "
                              f"{binding.member}")
        fresh.append(Grant(binding.role, binding.member, f"{binding.scope} {binding.resource}",
                           time.time()))
    if fresh:  # the next stages' pods use them first, maybe before IAM has propagated them
        record_grants(grants_path(s.workdir), fresh)
    for argv in iam.docker_auth_commands(s, docker_config):
        _run_ok(argv, s, f"docker auth for {argv[3]}")
        report.docker_registries.append(argv[3])

    access = check_bucket_access(s, apis.project_iam_policy(s.gke.project),
                                 apis.bucket_iam_policy(s.gke.bucket), planned=False)
    if access.status == "fail":
        raise user_error("infra", "the cluster's accounts still cannot read the bucket's metadata",
                         access.issue.problem, access.issue.fix)
    return report


def _blueprint_grants(s: InfraSettings) -> list[Grant]:
    """The project roles the deploy's Terraform granted (blueprint.service_account_roles),
    stamped when the deploy ended: no later than IAM began to propagate them."""
    from flows.backends.gke.infra.blueprint import service_account_roles

    path = s.workdir / BLUEPRINT_FILE
    if not path.is_file():
        return []
    at = time.time()
    return [Grant(role, member, f"project {s.gke.project}", at) for member, role in
            service_account_roles(path.read_text(), s.gke.cluster, s.gke.project)]


def _require_admission(s: InfraSettings, apis: GoogleApis, client: Any, planned: Planned
                       ) -> None:
    """After a deploy, the live Kueue objects must admit every pod the pipeline submits."""
    admission = [c for c in preflight(s, apis, client, planned) if c.name == "kueue-admission"]
    if admission and admission[0].status != "ok":
        raise user_error("infra", "the deployed Kueue configuration does not admit the pipeline's pods",
                         admission[0].issue.problem, admission[0].issue.fix)


def _reinstalling_kueue(s: InfraSettings, running: list[str], mismatches: list[str],
                        report: InfraReport, logger: StageLogger) -> list[str]:
    """The mismatches to deploy for, on a cluster whose Kueue the deploy reinstalls (from
    kubectl-apply's release to the chart's): removing the old release removes Kueue's CRDs
    and with them every Workload, and a running JobSet whose Workload is gone is suspended
    when Kueue comes back; whose ever it is, no deploy does that under it. With Workloads
    admitted, fair sharing alone waits for a run that finds none (a warning); a deploy
    needed for more is refused, naming them."""
    if not running:
        return [*mismatches, "Kueue's configuration has no fair sharing, which the deploy sets"]
    shown = ", ".join(running[:5]) + (f" and {len(running) - 5} more" if len(running) > 5
                                      else "")
    if mismatches:
        raise user_error(
            "infra", f"cluster {s.gke.cluster} needs a deploy ({'; '.join(mismatches)}), which "
            "also reinstalls Kueue from its chart (decision 0041) and would stop what Kueue "
            "runs now; nothing was deployed", f"admitted workloads: {shown}",
            "rerun once they have finished (`kubectl get workloads -A` lists them), or stop "
            "them first; the first deploy after the upgrade must find Kueue idle")
    warning = (f"cluster {s.gke.cluster}: fair sharing is not set yet; the deploy that sets it "
               f"reinstalls Kueue, which would stop the admitted workloads {shown}: not "
               "deploying now, a run that finds Kueue idle deploys it")
    logger.warning("%s", warning)
    report.warnings.append(warning)
    return mismatches


def _refuse_taking_others_pools(s: InfraSettings, current: dict[str, Any] | None,
                                client: Any, logger: StageLogger) -> None:
    """Stop before a deploy that would delete or replace another profile's TPU pool
    (infra/pool_owners.py says whose a pool is and why)."""
    from flows.backends.gke.infra.bucket import read_json
    from flows.backends.gke.infra.pool_owners import own_pools_recreated, pools_of_others_at_risk

    if current is None:
        return
    record = read_json(client, s.gke.bucket, s.state_prefix + "deployment.json")
    for name, effect in own_pools_recreated(current, s, record):
        logger.warning("WARNING: this deploy %s TPU node pool %s of cluster %s (its own, or "
                       "of a name no profile plans now, such as a team's pool named before "
                       "pools were per team): a JobSet running on it is lost",
                       effect.split(":", 1)[0], name, s.gke.cluster)
    if not (at_risk := pools_of_others_at_risk(current, s, record)):
        return
    owners = sorted({owner for _, owner, _ in at_risk})
    raise user_error(
        "infra", f"deploying {s.profile or 'this profile'} would take TPU node pool(s) of "
        f"{', '.join(owners)} away from cluster {s.gke.cluster}; nothing was deployed",
        "; ".join(f"pool {name} of {owner} would be {effect}"
                  for name, owner, effect in at_risk),
        f"give {s.profile or 'this profile'} the slice and capacity of the pool it would "
        f"take (gke.machine_type, gke.topology, gke.num_slices, gke.capacity as "
        f"{owners[0]} sets them), or a cluster of its own (gke.cluster); the pool stays "
        "in place: delete it yourself once its profile no longer runs there")


def _deploy(s: InfraSettings, apis: GoogleApis, client: Any, current: dict[str, Any] | None,
            mismatches: list[str], logger: StageLogger) -> None:
    from flows.backends.gke.infra.bundle import obtain_bundle

    bundle = obtain_bundle(s)
    if current is not None and not gke.restore_deployment(client, s):
        raise user_error("infra",
            f"cluster {s.gke.cluster} exists but differs from the profile, and no deployment "
            "folder was found to re-apply", "; ".join(mismatches),
            f"it was not deployed by tpurl (nothing under gs://{s.gke.bucket}/{s.state_prefix}): "
            "choose another gke.cluster name, or delete that cluster first")
    if current is not None:
        logger.warning("cluster %s differs from the profile (%s): re-applying", s.gke.cluster,
                       "; ".join(mismatches))
    gke.deploy(s, bundle.gcluster, client, bundle.blueprint_example, bundle.sha256, logger,
               current)
    after = apis.get_cluster(s.gke.project, s.gke.region, s.gke.cluster)
    still = gke.pool_mismatches(after, s) if after is not None else ["cluster not found"]
    if still:
        billed = gke.wrong_pools(after, s) if after is not None else []
        removal = "".join(f"remove {cmd.split()[4]} (it bills while it exists): {cmd}; "
                          for _, cmd in billed)
        raise user_error("infra", "gcluster deploy finished but the cluster does not match the profile",
                         "; ".join(still + [cost for cost, _ in billed]),
                         removal + "then compare the blueprint vars with the profile "
                         "(topology, num_slices, reservation, capacity) and rerun")
