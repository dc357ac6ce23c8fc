"""Pre-flight: what must hold before money is spent, each failure with its fix.

``gather`` reads the cloud through the ``GoogleApis`` seam (errors are kept as facts, not
raised, so one unreadable API does not hide the other checks); ``run_checks`` is a pure
function from those facts to a list of results. ``tpurl plan PROFILE --check`` prints them
(each with the live object it read) and exits 1 on a failure; the infra stage refuses to
deploy while any result is a failure (except a live Kueue configuration that does not admit
our pods, which the deploy re-applies). The checks of the plan itself (permissions, image
repository, Pathways images, Kueue admission, CPU-pool fit) live in preflight_access.py.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from flows.backends.gke.image.cloudbuild_spec import staging_bucket
from flows.backends.gke.infra import preflight_access as access
from flows.backends.gke.infra import preflight_cloudbuild as cloudbuild
from flows.backends.gke.infra.cloud import ApiNotFound, GoogleApis
from flows.backends.gke.infra.cluster import pool_mismatches
from flows.backends.gke.infra.iam import ROLES_WITH_BUCKETS_GET, desired_bindings, granted, members
from flows.backends.gke.infra.kueue_config import planned_kueue, toolkit_cpu_pool
from flows.backends.gke.infra.preflight_access import Planned
from flows.backends.gke.infra.settings import InfraSettings
from flows.common.issues import Issue
from flows.config.gke import CIDR_FIX

Status = Literal["ok", "warn", "unknown", "fail"]
REQUIRED_APIS = ("compute.googleapis.com", "container.googleapis.com",
                 "storage.googleapis.com", "iam.googleapis.com",
                 "cloudresourcemanager.googleapis.com", "artifactregistry.googleapis.com")
CLOUD_BUILD_API = "cloudbuild.googleapis.com"  # required unless image.builder is docker
MIN_JOBSET = (0, 10)
MIN_KUEUE = (0, 15)


# The profile field each check is about: the field of its Issue.
CHECK_FIELDS = {"authorized_cidr": "gke.authorized_cidr", "apis": "gke.project",
                "reservation": "gke.reservation", "tpu-quota": "gke.region",
                "jobset": "gke.cluster", "kueue": "gke.cluster",
                "bucket-metadata-access": "gke.iam_mode",
                "operator-permissions": "gke.project", "artifact-registry": "image.repository",
                "pathways-images": "gke.pathways_tag", "kueue-admission": "gke.kueue_queue",
                "cpu-pool-capacity": "gke.conversion_memory",
                "cloud-build-account": "image.builder"}


@dataclass(frozen=True)
class CheckResult:
    """A check's status and its Issue (category ``preflight/<check>``); for a passing check
    the issue's ``problem`` is what was found and its ``fix`` is empty or unused."""

    status: Status
    issue: Issue
    target: str = ""  # the live object read (or the planned one, before it exists)

    @property
    def name(self) -> str:
        return self.issue.category.removeprefix("preflight/")

    def render(self) -> str:
        line = f"[{self.status.upper():<7}] {self.name}: {self.issue.problem}"
        if self.target:
            line += f"\n          checked: {self.target}"
        fix = self.issue.fix
        return line + (f"\n          fix: {fix}" if fix and self.status != "ok" else "")


def result(name: str, status: Status, found: str, fix: str = "", target: str = ""
           ) -> CheckResult:
    return CheckResult(status, Issue(CHECK_FIELDS[name], found, fix, f"preflight/{name}"),
                       target)


@dataclass(frozen=True)
class FactError:
    """A fact that could not be read; the check it feeds reports 'unknown' with the reason."""

    message: str


@dataclass
class Facts:
    enabled_services: set[str] | FactError = field(default_factory=set)
    reservation: dict[str, Any] | FactError | None = None
    quotas: list[dict[str, Any]] | FactError = field(default_factory=list)
    cluster: dict[str, Any] | FactError | None = None
    addons: dict[str, Any] | FactError | None = None
    project_policy: dict[str, Any] | FactError = field(default_factory=dict)
    bucket_policy: dict[str, Any] | FactError = field(default_factory=dict)
    permissions: set[str] | FactError = field(
        default_factory=lambda: set(access.OPERATOR_PERMISSIONS))
    repository: dict[str, Any] | FactError | None = None
    images: dict[str, bool | FactError] = field(default_factory=dict)
    kueue: dict[str, Any] | FactError | None = None  # None: no cluster to read
    # Cloud Build's account and the policies that may grant it (preflight_cloudbuild.py);
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
        kueue = _read(apis.kueue_objects, cluster, s.gke.namespace, s.gke.kueue_queue)
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


def _unknown(name: str, fact: FactError, fix: str) -> CheckResult:
    return result(name, "unknown", f"could not be read ({fact.message})", fix)


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
        return _unknown("apis", enabled, "grant yourself roles/serviceusage.serviceUsageViewer, "
                        f"or run: {fix_all}")
    missing = [api for api in required if api not in enabled]
    if missing:
        return result("apis", "fail", f"not enabled: {', '.join(missing)}",
                           f"gcloud services enable {' '.join(missing)} --project={s.gke.project}")
    return result("apis", "ok", "required APIs enabled")


def _pool_exists(s: InfraSettings, cluster: Any) -> bool:
    return isinstance(cluster, dict) and not pool_mismatches(cluster, s)


def check_reservation(s: InfraSettings, res: dict[str, Any] | FactError | None,
                      cluster: Any = None) -> CheckResult:
    name = "reservation"
    if s.gke.scales_from_zero:
        return result(name, "ok", f"capacity {s.gke.capacity} consumes no reservation")
    listing = (f"gcloud compute reservations list --project={s.gke.project} "
               f"--filter=zone:{s.gke.zone}")
    if isinstance(res, FactError):
        return _unknown(name, res, f"check it yourself: {listing}")
    if res is None:
        return result(name, "fail", f"no reservation {s.gke.reservation!r} in {s.gke.zone}",
                           f"set gke.reservation to one listed by `{listing}` (same zone as "
                           "gke.zone), or ask your account team for v6e capacity there")
    specific = res.get("specificReservation") or {}
    machine = (specific.get("instanceProperties") or {}).get("machineType", "")
    if machine and machine.rsplit("/", 1)[-1] != s.gke.machine_type:
        return result(name, "fail", f"{s.gke.reservation} reserves {machine}, not "
                           f"{s.gke.machine_type}", "use a reservation of the profile's machine "
                           "type, or change gke.machine_type/topology to match it")
    if res.get("status", "READY") != "READY":
        return result(name, "fail", f"{s.gke.reservation} is {res.get('status')}",
                           "wait until it is READY (gcloud compute reservations describe)")
    if res.get("specificReservationRequired") is not True:
        # gke-node-pool's reservation_definitions.tf keeps only specific_reservation_required
        # reservations, and main.tf's precondition stops the apply ("Its consumption type must
        # be \"specific\""); the API's JSON may leave a false out.
        return result(name, "fail", f"{s.gke.reservation} is consumed automatically by any "
                      "matching VM (specificReservationRequired is not true); Cluster "
                      "Toolkit's node pool consumes only a specific reservation and stops the "
                      "deploy", "use a reservation that only VMs naming it consume (`gcloud compute "
                      f"reservations describe {s.gke.reservation} --zone={s.gke.zone}` shows "
                      "specificReservationRequired: true; gcloud's create flag is "
                      "--require-specific-reservation, your account team makes TPU ones), or "
                      "choose gke.capacity: on-demand, spot or flex-start")
    count, in_use = int(specific.get("count", 0)), int(specific.get("inUseCount", 0))
    free = count - in_use + (s.gke.hosts_needed if _pool_exists(s, cluster) else 0)
    chips = free * s.gke.chips_per_host
    if free < s.gke.hosts_needed:
        return result(name, "fail", f"{s.gke.reservation} has {free} free of {count} hosts "
                           f"({chips} chips); the pool needs {s.gke.hosts_needed} hosts "
                           f"({s.gke.total_chips} chips)", "free the reservation's hosts (another "
                           "node pool or VM uses them), or use a larger reservation")
    return result(name, "ok", f"{s.gke.reservation} in {s.gke.zone}: {free} free hosts "
                       f"({chips} chips) ≥ {s.gke.total_chips} chips needed")


def _quota_family(s: InfraSettings) -> str:
    match = re.match(r"ct(\d+)([a-z])", s.gke.machine_type)
    return f"V{match.group(1)}{match.group(2).upper()}" if match else s.gke.machine_type.upper()


def _quota_kind(s: InfraSettings) -> bool | None:
    """Which TPU quota the mode's VMs count against: True the preemptible one, False the
    on-demand one, None either. Compute Engine keeps a separate quota for preemptible
    (spot) TPUs (cloud.google.com/tpu/docs/quota: "on-demand and preemptible (spot)"),
    its metric named as the on-demand one with the PREEMPTIBLE_ prefix, as for every other
    resource (PREEMPTIBLE_CPUS, PREEMPTIBLE_NVIDIA_*_GPUS, PREEMPTIBLE_TPU_LITE_PODSLICE_V5).
    Flex-start: Cloud TPU's flex-start page asks for preemptible quota; for a GKE node pool
    that is unconfirmed here, so either metric counts."""
    return {"spot": True, "flex-start": None}.get(s.gke.capacity, False)


def check_quota(s: InfraSettings, quotas: list[dict[str, Any]] | FactError) -> CheckResult:
    name = "tpu-quota"
    if not s.gke.scales_from_zero:  # GKE's TPU troubleshooting page, "On-demand or Spot VM
        # quota": a TPU slice node pool that uses a TPU reservation needs no TPU quota
        return result(name, "ok", f"capacity reservation: the pool's VMs use "
                      f"{s.gke.reservation}'s hosts, which need no TPU quota")
    family, kind = _quota_family(s), _quota_kind(s)
    label = f"{'Preemptible ' if kind else ''}TPU {family.lower()}"
    console = (f"https://console.cloud.google.com/iam-admin/quotas?project={s.gke.project} "
               f"(filter: {label}, region {s.gke.region})")
    if isinstance(quotas, FactError):
        return _unknown(name, quotas, f"check the {label} quota in {console}")
    tpu = [q for q in quotas if "TPU" in q.get("metric", "") and family in q.get("metric", "")
           and kind in (None, str(q.get("metric", "")).startswith("PREEMPTIBLE_"))]
    if not tpu:
        what = (f"no preemptible {family} TPU quota metric (PREEMPTIBLE_…{family}…)" if kind
                else f"no {family} TPU quota metric")
        why = ("; spot VMs count against the preemptible TPU quota, not the on-demand one"
               if kind else "")
        return result(name, "unknown", f"{what} in {s.gke.region}{why}",
                      f"check the {label} quota in {console}; request "
                      f"{s.gke.total_chips} chips if it is missing")
    # A pool that scales from zero holds no chips while nothing trains: its slice needs headroom
    best = max(tpu, key=lambda q: float(q.get("limit", 0)) - float(q.get("usage", 0)))
    headroom = float(best.get("limit", 0)) - float(best.get("usage", 0))
    if headroom < s.gke.total_chips:
        return result(name, "fail", f"{best['metric']} in {s.gke.region}: {headroom:g} chips "
                           f"free, {s.gke.total_chips} needed",
                           f"request a quota increase for {best['metric']} in {console}")
    return result(name, "ok", f"{best['metric']}: {headroom:g} chips free")


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
        return [_unknown("jobset", reason, fix), _unknown("kueue", reason, fix)]
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
            return _unknown(name, fact, "grant yourself roles/iam.securityReviewer to read "
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
                            if g.reservation else f"none (capacity {g.capacity})"),
            "tpu-quota": f"projects/{g.project}/regions/{g.region} quotas",
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
        return [*out, _unknown("kueue-admission", reason, fix),
                _unknown("cpu-pool-capacity", reason, fix)]
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
