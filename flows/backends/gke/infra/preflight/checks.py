"""Pre-flight: what must hold before money is spent, each failure with its fix.

``gather`` reads the cloud through the ``GoogleApis`` seam (errors are kept as facts, not
raised, so one unreadable API does not hide the other checks); ``run_checks`` is a pure
function from those facts to a list of results. ``tpurl plan PROFILE --check`` prints them
(each with the live object it read) and exits 1 on a failure; the infra stage refuses to
deploy while any result is a failure (except a live Kueue configuration that does not admit
our pods, which the deploy re-applies). The checks of the plan itself (permissions, image
repository, Pathways images, Kueue admission, CPU-pool fit) live in access.py.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any

from flows.backends.gke.image.cloudbuild_spec import staging_bucket
from flows.backends.gke.infra.cloud import ApiNotFound, GoogleApis
from flows.backends.gke.infra.iam import ROLES_WITH_BUCKETS_GET, desired_bindings, granted, members
from flows.backends.gke.infra.kueue_config import planned_kueue, toolkit_cpu_pool
from flows.backends.gke.infra.preflight import access
from flows.backends.gke.infra.preflight import cloud_build as cloudbuild
from flows.backends.gke.infra.preflight.access import Planned
from flows.backends.gke.infra.preflight.capacity import check_quota, check_reservation
from flows.backends.gke.infra.preflight.generation import check_generation
from flows.backends.gke.infra.preflight.results import CheckResult, FactError, result, unknown
from flows.backends.gke.infra.preflight.team_queues import check_team_queues
from flows.backends.gke.infra.preflight.zones import check_zone_modes
from flows.backends.gke.infra.settings import InfraSettings
from flows.config.gke import CIDR_FIX

REQUIRED_APIS = ("compute.googleapis.com", "container.googleapis.com",
                 "storage.googleapis.com", "iam.googleapis.com",
                 "cloudresourcemanager.googleapis.com", "artifactregistry.googleapis.com")
CLOUD_BUILD_API = "cloudbuild.googleapis.com"  # required unless image.builder is docker
MIN_JOBSET = (0, 10)
MIN_KUEUE = (0, 15)


@dataclass
class Facts:
    enabled_services: set[str] | FactError = field(default_factory=set)
    reservation: dict[str, Any] | FactError | None = None
    quotas: list[dict[str, Any]] | FactError = field(default_factory=list)
    # the zones offering the profile's machine type (None: not read, the check is skipped)
    zones_offering: set[str] | FactError | None = None
    cluster: dict[str, Any] | FactError | None = None
    addons: dict[str, Any] | FactError | None = None
    project_policy: dict[str, Any] | FactError = field(default_factory=dict)
    bucket_policy: dict[str, Any] | FactError = field(default_factory=dict)
    permissions: set[str] | FactError = field(
        default_factory=lambda: set(access.OPERATOR_PERMISSIONS))
    repository: dict[str, Any] | FactError | None = None
    images: dict[str, bool | FactError] = field(default_factory=dict)
    kueue: dict[str, Any] | FactError | None = None  # None: no cluster to read
    # Cloud Build's account and the policies that may grant it (cloud_build.py);
    # None: not read (image.builder docker)
    cloud_build_account: str | FactError | None = None
    staging_policy: dict[str, Any] | FactError | None = None
    repository_policy: dict[str, Any] | FactError | None = None


def _read(call: Any, *args: Any) -> Any:
    try:
        return call(*args)
    except Exception as exc:  # kept as a fact: the check says what could not be read
        return FactError(f"{type(exc).__name__}: {str(exc)[:200]}")


def gather(apis: GoogleApis, s: InfraSettings, bucket_exists: bool = True,
           planned: Planned | None = None) -> Facts:
    """Reads only: every call below is a GET (or testIamPermissions, which changes nothing)."""
    planned = planned or Planned()
    cluster = _read(apis.get_cluster, s.gke.project, s.gke.region, s.gke.cluster)
    addons = kueue = None
    if isinstance(cluster, dict):
        addons = _read(apis.addon_versions, cluster)
        kueue = _read(apis.kueue_objects, cluster, s.gke.namespace, s.queue)
    where = access.ar_repository(planned.image_repository)
    builds = planned.image_builder != "docker" and bool(planned.image_repository)
    return Facts(
        cloud_build_account=(_read(apis.cloud_build_account, s.gke.project, where[1] if where
                                   else s.gke.region) if builds else None),
        staging_policy=(_read(_policy_or_none, apis.bucket_iam_policy,
                              staging_bucket(s.gke.project)) if builds else None),
        repository_policy=(_read(_policy_or_none, apis.repository_iam_policy, *where)
                           if builds and where else None),
        permissions=_read(apis.test_iam_permissions, s.gke.project,
                          list(access.OPERATOR_PERMISSIONS)),
        repository=_read(apis.get_repository, *where) if where else None,
        images={ref: _read(apis.image_exists, ref) for ref in planned.pathways_images},
        kueue=kueue,
        enabled_services=_read(apis.enabled_services, s.gke.project),
        reservation=(_read(apis.get_reservation, s.gke.project, s.gke.zone, s.gke.reservation)
                     if s.gke.reservation else None),
        quotas=_read(apis.region_quotas, s.gke.project, s.gke.region),
        zones_offering=_read(apis.zones_offering, s.gke.project, s.gke.machine_type),
        cluster=cluster, addons=addons,
        project_policy=_read(apis.project_iam_policy, s.gke.project),
        bucket_policy=_read(apis.bucket_iam_policy, s.gke.bucket) if bucket_exists else {})


def _policy_or_none(call: Any, *args: Any) -> dict[str, Any]:
    """A policy, or no bindings when the resource does not exist yet (the flow creates the
    staging bucket and the repository; only project-level grants count for them then)."""
    try:
        return dict(call(*args))
    except (ApiNotFound, LookupError):
        return {"bindings": []}


def check_authorized_cidr(s: InfraSettings) -> CheckResult:
    if s.gke.open_to_world:
        return result("authorized_cidr", "warn", f"{s.gke.authorized_cidr} opens the GKE "
                           "control plane to the whole internet", CIDR_FIX)
    return result("authorized_cidr", "ok", f"control plane reachable from {s.gke.authorized_cidr}")


def check_apis(s: InfraSettings, enabled: set[str] | FactError,
               extra: tuple[str, ...] = ()) -> CheckResult:
    required = (*REQUIRED_APIS, *extra)
    fix_all = f"gcloud services enable {' '.join(required)} --project={s.gke.project}"
    if isinstance(enabled, FactError):
        return unknown("apis", enabled, "grant yourself roles/serviceusage.serviceUsageViewer, "
                        f"or run: {fix_all}")
    missing = [api for api in required if api not in enabled]
    if missing:
        return result("apis", "fail", f"not enabled: {', '.join(missing)}",
                           f"gcloud services enable {' '.join(missing)} --project={s.gke.project}")
    return result("apis", "ok", "required APIs enabled")


def version_tuple(version: str | None) -> tuple[int, ...] | None:
    match = re.match(r"v?(\d+)\.(\d+)", version or "")
    return (int(match.group(1)), int(match.group(2))) if match else None


def check_addons(s: InfraSettings, cluster: Any, addons: dict[str, Any] | FactError | None
                 ) -> list[CheckResult]:
    if cluster is None:
        return [result("jobset", "ok", "no cluster yet: the blueprint installs JobSet 0.10.1"),
                result("kueue", "ok", "no cluster yet: the blueprint installs Kueue")]
    reapply = ("re-apply the blueprint (`tpurl run` re-deploys a cluster whose pool differs; "
               "or `gcluster deploy … -w`), which installs the versions it pins")
    if isinstance(cluster, FactError) or isinstance(addons, FactError) or addons is None:
        fact = cluster if isinstance(cluster, FactError) else addons
        reason = fact if isinstance(fact, FactError) else FactError("no answer")
        fix = (f"check that this machine is inside gke.authorized_cidr ({s.gke.authorized_cidr}) "
               "and may read the cluster (roles/container.viewer)")
        return [unknown("jobset", reason, fix), unknown("kueue", reason, fix)]
    out = []
    jobset = version_tuple(addons.get("jobset"))
    served = addons.get("jobset_api_versions") or []
    if jobset is None or jobset < MIN_JOBSET or "v1alpha2" not in served:
        out.append(result("jobset", "fail", f"JobSet {addons.get('jobset') or 'missing'} "
                               f"(serves {', '.join(served) or 'no API'}); need ≥ 0.10 with "
                               "jobset.x-k8s.io/v1alpha2", reapply))
    else:
        out.append(result("jobset", "ok", f"JobSet {addons['jobset']} serves v1alpha2"))
    kueue = version_tuple(addons.get("kueue"))
    if kueue is None or kueue < MIN_KUEUE:
        out.append(result("kueue", "fail", f"Kueue {addons.get('kueue') or 'missing'}; "
                               "need ≥ 0.15", reapply))
    else:
        out.append(result("kueue", "ok", f"Kueue {addons['kueue']}"))
    return out


def check_bucket_access(s: InfraSettings, project_policy: dict[str, Any] | FactError,
                        bucket_policy: dict[str, Any] | FactError,
                        planned: bool = True) -> CheckResult:
    """Both accounts need storage.buckets.get, or MaxText reports "bucket not found".

    ``planned``: count the bindings the infra stage is about to grant (before the stage);
    after it, pass False so only bindings that really exist count.
    """
    name = "bucket-metadata-access"
    fix = (f"grant roles/storage.legacyBucketReader on gs://{s.gke.bucket} to each account "
           f"(`gcloud storage buckets add-iam-policy-binding gs://{s.gke.bucket} "
           "--member=serviceAccount:SA --role=roles/storage.legacyBucketReader`), or set "
           "gke.iam_mode: bucket-scoped and rerun the infra stage")
    for fact in (project_policy, bucket_policy):
        if isinstance(fact, FactError):
            return unknown(name, fact, "grant yourself roles/iam.securityReviewer to read "
                            f"IAM policies, or check by hand; otherwise: {fix}")
    assert isinstance(project_policy, dict) and isinstance(bucket_policy, dict)
    lacking = []
    for member in members(s):
        roles = granted(project_policy, member) | granted(bucket_policy, member)
        if planned:
            roles |= {b.role for b in desired_bindings(s) if b.member == member}
        if not roles & ROLES_WITH_BUCKETS_GET:
            lacking.append(member.split(":", 1)[1])
    if lacking:
        return result(name, "fail", f"{', '.join(lacking)} cannot read gs://{s.gke.bucket}'s "
                           "metadata (storage.buckets.get): jobs would fail with a "
                           "misleading 'bucket not found'", fix)
    return result(name, "ok", "workload and node accounts can read the bucket's metadata")


def targets(s: InfraSettings) -> dict[str, str]:
    """The live object each existing check reads."""
    g = s.gke
    return {"authorized_cidr": "the profile's gke.authorized_cidr (no cloud read)",
            "apis": f"projects/{g.project} enabled services (Service Usage API)",
            "reservation": (f"projects/{g.project}/zones/{g.zone}/reservations/{g.reservation}"
                            if g.reservation else f"none (capacity {', '.join(g.capacity_chain)})"),
            "tpu-quota": f"projects/{g.project}/regions/{g.region} quotas",
            "zone-capacity": f"projects/{g.project} machine types named {g.machine_type} per "
                             "zone, and the documented flex-start zones",
            "jobset": f"cluster {g.cluster}: jobset-system/jobset-controller-manager and CRD "
                      "jobsets.jobset.x-k8s.io",
            "kueue": f"cluster {g.cluster}: kueue-system/kueue-controller-manager",
            "bucket-metadata-access": f"IAM policies of projects/{g.project} and gs://{g.bucket}"}


def _fact(value: Any) -> Any:
    return Exception(value.message) if isinstance(value, FactError) else value


def planned_checks(s: InfraSettings, facts: Facts, planned: Planned) -> list[CheckResult]:
    held = _fact(facts.permissions)
    can_create = isinstance(held, set) and "artifactregistry.repositories.create" in held
    out = [result("operator-permissions", *access.check_operator_permissions(s, held))]
    if facts.cloud_build_account is not None:
        out.append(result("cloud-build-account", *cloudbuild.check_cloud_build_account(
            s.gke.project, planned.image_builder, planned.image_repository,
            _fact(facts.cloud_build_account), _fact(facts.project_policy),
            _fact(facts.staging_policy), _fact(facts.repository_policy))))
    if planned.image_repository:
        out.append(result("artifact-registry", *access.check_artifact_registry(
            planned, _fact(facts.repository), can_create)))
    if planned.pathways_images:
        out.append(result("pathways-images", *access.check_pathways_images(
            s, planned, {k: _fact(v) for k, v in facts.images.items()})))
    if not planned.pod_sets:
        return out
    cluster = facts.cluster
    if isinstance(cluster, FactError) or isinstance(facts.kueue, FactError):
        reason = cluster if isinstance(cluster, FactError) else facts.kueue
        assert isinstance(reason, FactError)
        fix = f"check that this machine is inside gke.authorized_cidr ({s.gke.authorized_cidr})"
        return [*out, unknown("kueue-admission", reason, fix),
                unknown("cpu-pool-capacity", reason, fix)]
    if cluster is None or facts.kueue is None:  # not deployed yet: what the deploy creates
        kueue, pools = planned_kueue(s), [toolkit_cpu_pool(s)]
        status, found, fix, target = access.check_kueue_admission(s, planned, kueue)
        out.append(result("kueue-admission", status, f"(to be deployed) {found}", fix,
                          f"deployments/blueprints/kueue-configuration.yaml.tftpl: {target}"))
        status, found, fix, target = access.check_cpu_pool(s, planned, pools)
        out.append(result("cpu-pool-capacity", status, f"(to be deployed) {found}", fix,
                          f"{target} as the toolkit creates it (n4-standard-64, 100 GB)"))
        return out
    out.append(result("kueue-admission", *access.check_kueue_admission(
        s, planned, facts.kueue)))
    if s.team_queue:
        out.append(result("team-queues", *check_team_queues(s.team_queue, facts.kueue,
                                                            planned_kueue(s))))
    out.append(result("cpu-pool-capacity", *access.check_cpu_pool(
        s, planned, list(cluster.get("nodePools") or []))))
    return out


def run_checks(s: InfraSettings, facts: Facts, planned: Planned | None = None
               ) -> list[CheckResult]:
    planned = planned or Planned()
    extra = (CLOUD_BUILD_API,) if planned.image_builder != "docker" else ()
    results = [check_authorized_cidr(s), check_apis(s, facts.enabled_services, extra),
               check_reservation(s, facts.reservation, facts.cluster),
               check_quota(s, facts.quotas)]
    if facts.zones_offering is not None:
        results.append(check_zone_modes(s, facts.zones_offering))
    if (generation := check_generation(s)) is not None:
        results.append(generation)
    results += check_addons(s, facts.cluster, facts.addons)
    results.append(check_bucket_access(s, facts.project_policy, facts.bucket_policy))
    where = targets(s)
    results = [dataclasses.replace(r, target=where.get(r.name, r.target)) for r in results]
    return results + planned_checks(s, facts, planned)


def failures(results: list[CheckResult]) -> list[CheckResult]:
    return [r for r in results if r.status == "fail"]


def render_checks(results: list[CheckResult]) -> str:
    bad = failures(results)
    head = f"pre-flight: {len(results) - len(bad)} of {len(results)} checks without failure"
    return "\n".join([head, *(r.render() for r in results)])
