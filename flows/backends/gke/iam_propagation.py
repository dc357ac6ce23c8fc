"""IAM propagation after tpurl's own grants: a 403 right after them is waited out, bounded.

Google: "access changes, such as granting a role ... are eventually consistent"; changes
to an allow policy "typically propagate in 2 minutes, but could potentially take 7 minutes
or longer" (cloud.google.com/iam/docs/access-change-propagation). The infra stage grants
the cluster's accounts their storage roles (infra/iam.py, infra/provision.py), and the next
stages' pods are the first to use them: a convert pod that starts a minute later writes the
bucket as that account and may be refused with GCS's 403 ("<account> does not have
storage.objects.create access to the Google Cloud Storage object. Permission
'storage.objects.create' denied on resource (or it may not exist).", the JSON API's error
message, which google-cloud-storage and tensorstore both print). Read as a program error
that is a user error, not retried: the run fails on the cloud's lag.

So the infra stage records what it granted and when (``record``, beside its gcluster work
directory): its own gcloud grants, and after a deploy the project roles the blueprint's
Terraform bound to the cluster's service accounts (infra/blueprint.py
service_account_roles: storage.admin or storage.objectViewer, artifactregistry.reader, ...),
which are as new to IAM as its own; and a stage whose program failed on such a 403 asks
next_action.py (``iam_lag``, pure, on the grants ``load`` read here): a 403 naming an account
and a permission of a role granted it less than ``budget_s`` ago is waited out (the stage
resubmits after a pause, logging that it waits for IAM propagation);
once the budget is spent it fails naming the role, the account and the fix. A 403 for
anything not just granted fails at once: no blind retries.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from flows.common.failure_codes import Failure

# Google's "potentially 7 minutes" (gke.iam_propagation_s): past it the grant is not lagging,
# it is missing
from flows.core.budgets import IAM_PROPAGATION_S as BUDGET_S

CODE = Failure.GKE_IAM_NOT_PROPAGATED
GRANTS_FILE = "iam-grants.json"

# What each role the infra stage or its Terraform grants allows (predefined roles,
# cloud.google.com/storage/docs/access-control/iam-roles, cloud.google.com/artifact-registry/
# docs/access-control): a permission outside the role was never granted. The blueprint's
# logging and monitoring roles are recorded too but never produce Cloud Storage's 403.
_ROLE_PERMISSIONS: dict[str, tuple[str, ...]] = {
    "roles/storage.admin": ("storage.",),
    "roles/storage.objectAdmin": ("storage.objects.", "storage.managedFolders.",
                                  "storage.multipartUploads."),
    "roles/storage.objectViewer": ("storage.objects.get", "storage.objects.list",
                                   "storage.managedFolders.get",
                                   "storage.managedFolders.list"),
    "roles/storage.legacyBucketReader": ("storage.buckets.get", "storage.objects.list"),
    "roles/artifactregistry.reader": (
        "artifactregistry.repositories.downloadArtifacts", "artifactregistry.repositories.get",
        "artifactregistry.repositories.list", "artifactregistry.dockerimages.get",
        "artifactregistry.dockerimages.list"),
}
# the caller as GCS names it: a service account's email, or a team's Workload Identity
# principal (team_identity.py) as its principal:// identifier
_DENIED = re.compile(r"(?:(?P<principal>principal://[\w./:-]+)|(?P<email>[\w.+-]+@[\w.-]+)) "
                     r"does not have (?P<permission>[a-z]+(?:\.[A-Za-z]+)+) access")


@dataclass(frozen=True)
class Grant:
    role: str
    member: str  # "serviceAccount:EMAIL" or a team's "principal://..."
    resource: str  # "project P" or "bucket B"
    at: float  # epoch seconds the grant was made

    def allows(self, member: str, permission: str) -> bool:
        return member == self.member and permission.startswith(
            _ROLE_PERMISSIONS.get(self.role, ("\0",)))


def grants_path(workdir: Path) -> Path:
    return workdir / GRANTS_FILE


def record(path: Path, grants: list[Grant]) -> None:
    """Add this infra run's grants to those kept (a grant older than the budget says
    nothing any more and is dropped)."""
    now = time.time()
    kept = [g for g in load(path) if now - g.at <= BUDGET_S * 4] + grants
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps([asdict(g) for g in kept], indent=1))


def load(path: Path) -> list[Grant]:
    try:
        return [Grant(**row) for row in json.loads(path.read_text())]
    except (OSError, ValueError, TypeError):
        return []  # none recorded (the infra stage ran elsewhere, or long ago)


def denial(text: str) -> tuple[str, str] | None:
    """(member, permission) of the last GCS 403 in ``text``."""
    found = list(_DENIED.finditer(text))
    if not found:
        return None
    last = found[-1]
    member = last["principal"] or f"serviceAccount:{last['email']}"
    return member, last["permission"]
