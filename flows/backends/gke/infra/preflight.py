"""Pre-flight: what must hold before money is spent, each failure with its fix.

``gather`` reads the cloud through the ``GoogleApis`` seam (errors are kept as facts, not
raised, so one unreadable API does not hide the other checks); ``run_checks`` is a pure
function from those facts to a list of results. ``tpurl plan PROFILE --check`` prints them;
the infra stage refuses to deploy while any result is a failure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from flows.backends.gke.infra.cloud import GoogleApis
from flows.backends.gke.infra.cluster import pool_mismatches
from flows.backends.gke.infra.iam import ROLES_WITH_BUCKETS_GET, desired_bindings, granted, members
from flows.backends.gke.infra.settings import CIDR_FIX, InfraSettings

Status = Literal["ok", "warn", "unknown", "fail"]
REQUIRED_APIS = ("compute.googleapis.com", "container.googleapis.com",
                 "storage.googleapis.com", "iam.googleapis.com",
                 "cloudresourcemanager.googleapis.com", "artifactregistry.googleapis.com")
MIN_JOBSET = (0, 10)
MIN_KUEUE = (0, 15)


@dataclass(frozen=True)
class CheckResult:
    name: str
    status: Status
    summary: str
    fix: str = ""

    def render(self) -> str:
        line = f"[{self.status.upper():<7}] {self.name}: {self.summary}"
        return line + (f"\n          fix: {self.fix}" if self.fix and self.status != "ok" else "")


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


def _read(call: Any, *args: Any) -> Any:
    try:
        return call(*args)
    except Exception as exc:  # kept as a fact: the check says what could not be read
        return FactError(f"{type(exc).__name__}: {str(exc)[:200]}")


def gather(apis: GoogleApis, s: InfraSettings, bucket_exists: bool = True) -> Facts:
    cluster = _read(apis.get_cluster, s.project, s.region, s.cluster)
    addons = None
    if isinstance(cluster, dict):
        addons = _read(apis.addon_versions, cluster)
    return Facts(
        enabled_services=_read(apis.enabled_services, s.project),
        reservation=_read(apis.get_reservation, s.project, s.zone, s.reservation),
        quotas=_read(apis.region_quotas, s.project, s.region),
        cluster=cluster, addons=addons,
        project_policy=_read(apis.project_iam_policy, s.project),
        bucket_policy=_read(apis.bucket_iam_policy, s.bucket) if bucket_exists else {})


def _unknown(name: str, fact: FactError, fix: str) -> CheckResult:
    return CheckResult(name, "unknown", f"could not be read ({fact.message})", fix)


def check_authorized_cidr(s: InfraSettings) -> CheckResult:
    if s.open_to_world:
        return CheckResult("authorized_cidr", "warn", f"{s.authorized_cidr} opens the GKE "
                           "control plane to the whole internet", CIDR_FIX)
    return CheckResult("authorized_cidr", "ok", f"control plane reachable from {s.authorized_cidr}")


def check_apis(s: InfraSettings, enabled: set[str] | FactError) -> CheckResult:
    fix_all = f"gcloud services enable {' '.join(REQUIRED_APIS)} --project={s.project}"
    if isinstance(enabled, FactError):
        return _unknown("apis", enabled, "grant yourself roles/serviceusage.serviceUsageViewer, "
                        f"or run: {fix_all}")
    missing = [api for api in REQUIRED_APIS if api not in enabled]
    if missing:
        return CheckResult("apis", "fail", f"not enabled: {', '.join(missing)}",
                           f"gcloud services enable {' '.join(missing)} --project={s.project}")
    return CheckResult("apis", "ok", "required APIs enabled")


def _pool_exists(s: InfraSettings, cluster: Any) -> bool:
    return isinstance(cluster, dict) and not pool_mismatches(cluster, s)


def check_reservation(s: InfraSettings, res: dict[str, Any] | FactError | None,
                      cluster: Any = None) -> CheckResult:
    name = "reservation"
    listing = (f"gcloud compute reservations list --project={s.project} "
               f"--filter=zone:{s.zone}")
    if isinstance(res, FactError):
        return _unknown(name, res, f"check it yourself: {listing}")
    if res is None:
        return CheckResult(name, "fail", f"no reservation {s.reservation!r} in {s.zone}",
                           f"set gke.reservation to one listed by `{listing}` (same zone as "
                           "gke.zone), or ask your account team for v6e capacity there")
    specific = res.get("specificReservation") or {}
    machine = (specific.get("instanceProperties") or {}).get("machineType", "")
    if machine and machine.rsplit("/", 1)[-1] != s.machine_type:
        return CheckResult(name, "fail", f"{s.reservation} reserves {machine}, not "
                           f"{s.machine_type}", "use a reservation of the profile's machine "
                           "type, or change gke.machine_type/topology to match it")
    if res.get("status", "READY") != "READY":
        return CheckResult(name, "fail", f"{s.reservation} is {res.get('status')}",
                           "wait until it is READY (gcloud compute reservations describe)")
    count, in_use = int(specific.get("count", 0)), int(specific.get("inUseCount", 0))
    free = count - in_use + (s.hosts_needed if _pool_exists(s, cluster) else 0)
    chips = free * s.chips_per_host
    if free < s.hosts_needed:
        return CheckResult(name, "fail", f"{s.reservation} has {free} free of {count} hosts "
                           f"({chips} chips); the pool needs {s.hosts_needed} hosts "
                           f"({s.total_chips} chips)", "free the reservation's hosts (another "
                           "node pool or VM uses them), or use a larger reservation")
    return CheckResult(name, "ok", f"{s.reservation} in {s.zone}: {free} free hosts "
                       f"({chips} chips) ≥ {s.total_chips} chips needed")


def _quota_family(s: InfraSettings) -> str:
    match = re.match(r"ct(\d+)([a-z])", s.machine_type)
    return f"V{match.group(1)}{match.group(2).upper()}" if match else s.machine_type.upper()


def check_quota(s: InfraSettings, quotas: list[dict[str, Any]] | FactError,
                cluster: Any = None) -> CheckResult:
    name = "tpu-quota"
    console = (f"https://console.cloud.google.com/iam-admin/quotas?project={s.project} "
               f"(filter: TPU {_quota_family(s).lower()}, region {s.region})")
    if isinstance(quotas, FactError):
        return _unknown(name, quotas, f"check the TPU quota in {console}")
    family = _quota_family(s)
    tpu = [q for q in quotas if "TPU" in q.get("metric", "") and family in q.get("metric", "")]
    if not tpu:
        return CheckResult(name, "unknown", f"no {family} TPU quota metric in {s.region}",
                           f"check the TPU quota in {console}; request "
                           f"{s.total_chips} chips if it is missing")
    held = s.total_chips if _pool_exists(s, cluster) else 0
    best = max(tpu, key=lambda q: float(q.get("limit", 0)) - float(q.get("usage", 0)))
    headroom = float(best.get("limit", 0)) - float(best.get("usage", 0)) + held
    if headroom < s.total_chips:
        return CheckResult(name, "fail", f"{best['metric']} in {s.region}: {headroom:g} chips "
                           f"free, {s.total_chips} needed",
                           f"request a quota increase for {best['metric']} in {console}")
    return CheckResult(name, "ok", f"{best['metric']}: {headroom:g} chips free")


def version_tuple(version: str | None) -> tuple[int, ...] | None:
    match = re.match(r"v?(\d+)\.(\d+)", version or "")
    return (int(match.group(1)), int(match.group(2))) if match else None


def check_addons(s: InfraSettings, cluster: Any, addons: dict[str, Any] | FactError | None
                 ) -> list[CheckResult]:
    if cluster is None:
        return [CheckResult("jobset", "ok", "no cluster yet: the blueprint installs JobSet 0.10.1"),
                CheckResult("kueue", "ok", "no cluster yet: the blueprint installs Kueue")]
    reapply = ("re-apply the blueprint (`tpurl run` re-deploys a cluster whose pool differs; "
               "or `gcluster deploy … -w`), which installs the versions it pins")
    if isinstance(cluster, FactError) or isinstance(addons, FactError) or addons is None:
        fact = cluster if isinstance(cluster, FactError) else addons
        reason = fact if isinstance(fact, FactError) else FactError("no answer")
        fix = (f"check that this machine is inside gke.authorized_cidr ({s.authorized_cidr}) "
               "and may read the cluster (roles/container.viewer)")
        return [_unknown("jobset", reason, fix), _unknown("kueue", reason, fix)]
    out = []
    jobset = version_tuple(addons.get("jobset"))
    served = addons.get("jobset_api_versions") or []
    if jobset is None or jobset < MIN_JOBSET or "v1alpha2" not in served:
        out.append(CheckResult("jobset", "fail", f"JobSet {addons.get('jobset') or 'missing'} "
                               f"(serves {', '.join(served) or 'no API'}); need ≥ 0.10 with "
                               "jobset.x-k8s.io/v1alpha2", reapply))
    else:
        out.append(CheckResult("jobset", "ok", f"JobSet {addons['jobset']} serves v1alpha2"))
    kueue = version_tuple(addons.get("kueue"))
    if kueue is None or kueue < MIN_KUEUE:
        out.append(CheckResult("kueue", "fail", f"Kueue {addons.get('kueue') or 'missing'}; "
                               "need ≥ 0.15", reapply))
    else:
        out.append(CheckResult("kueue", "ok", f"Kueue {addons['kueue']}"))
    return out


def check_bucket_access(s: InfraSettings, project_policy: dict[str, Any] | FactError,
                        bucket_policy: dict[str, Any] | FactError,
                        planned: bool = True) -> CheckResult:
    """Both accounts need storage.buckets.get, or MaxText reports "bucket not found".

    ``planned``: count the bindings the infra stage is about to grant (before the stage);
    after it, pass False so only bindings that really exist count.
    """
    name = "bucket-metadata-access"
    fix = (f"grant roles/storage.legacyBucketReader on gs://{s.bucket} to each account "
           f"(`gcloud storage buckets add-iam-policy-binding gs://{s.bucket} "
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
        return CheckResult(name, "fail", f"{', '.join(lacking)} cannot read gs://{s.bucket}'s "
                           "metadata (storage.buckets.get): jobs would fail with a "
                           "misleading 'bucket not found'", fix)
    return CheckResult(name, "ok", "workload and node accounts can read the bucket's metadata")


def run_checks(s: InfraSettings, facts: Facts) -> list[CheckResult]:
    results = [check_authorized_cidr(s), check_apis(s, facts.enabled_services),
               check_reservation(s, facts.reservation, facts.cluster),
               check_quota(s, facts.quotas, facts.cluster)]
    results += check_addons(s, facts.cluster, facts.addons)
    results.append(check_bucket_access(s, facts.project_policy, facts.bucket_policy))
    return results


def failures(results: list[CheckResult]) -> list[CheckResult]:
    return [r for r in results if r.status == "fail"]


def render_checks(results: list[CheckResult]) -> str:
    bad = failures(results)
    head = f"pre-flight: {len(results) - len(bad)} of {len(results)} checks without failure"
    return "\n".join([head, *(r.render() for r in results)])
