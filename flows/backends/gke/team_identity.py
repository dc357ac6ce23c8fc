"""Who a run's pods are, to Google: the team's own Kubernetes service account, bound by
Workload Identity Federation to the team's principal, which may write the team's bucket only.

Why not the node's account: GKE's metadata server serves a pod its Kubernetes service
account's identity only when the pod is not on the host's network; a ``hostNetwork`` pod
talks to the node's metadata server and acts as the node pool's service account (GKE's
Workload Identity Federation page, "Limitations"). Every team's runs share the cluster's
node pools, so the node account must hold every team's bucket (the Pathways workers write
checkpoints there through ``ENABLE_PATHWAYS_PERSISTENCE``): a team's code on the host
network could write any team's bucket. So the pods that run a team's code (the training
program with its reward functions, which shares the Pathways head pod; conversion; export)
are never ``hostNetwork`` nor privileged, and name the team's account. Only the Pathways
workers, Google's pinned server image with no team code, stay on the host's network, as
google/pathways-job builds them (docs/decisions/0027-an-identity-per-team.md).

The principal is Workload Identity Federation's direct form (no Google service account,
no annotation): ``principal://iam.googleapis.com/projects/NUMBER/locations/global/
workloadIdentityPools/PROJECT.svc.id.goog/subject/ns/NAMESPACE/sa/ACCOUNT``. A profile in no
team runs as the namespace's ``default`` account: team-less profiles of one namespace share
it, and no team's account.

Pure: names and grants from the profile and the teams file; nothing is called.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass

from flows.common.failure_codes import Failure
from flows.common.issues import Issue

TEAM_ACCOUNT_PREFIX = "tpurl-team-"
NO_TEAM_ACCOUNT = "default"
PROJECT_NUMBER = "PROJECT_NUMBER"  # written where the number is not known yet (the plan)
# storage.buckets.get as well: without it MaxText/Orbax report "bucket not found"
TEAM_ROLES = ("roles/storage.objectAdmin", "roles/storage.legacyBucketReader")


NODE_ACCOUNT_MODULE = "node_pool_service_account"
"""The example's node pool account module (``CLUSTER-gke-np-sa``), which pools of no team use."""


def team_node_account_name(team: str) -> str:
    """The ``name`` of the blueprint's service-account module for ``team``'s TPU nodes:
    Cluster Toolkit's modules/project/service-account prefixes it with the deployment name
    (``CLUSTER-np-<digest>``), and an account id has at most 30 characters, so the team is
    named by a digest, as the example's ``gke-np-sa`` is a fixed 9 characters."""
    return "np-" + hashlib.sha256(team.encode()).hexdigest()[:6]


def team_node_account_module(team: str) -> str:
    """The blueprint module id of ``team``'s node account (module ids may hold dashes)."""
    return f"np-sa-{team}"


def node_account(project: str, cluster: str, team: str | None) -> str:
    """The service account the TPU nodes of ``team``'s pools run as (None: the example's
    node account, which pools of profiles in no team keep): whatever runs on the host's
    network there, the Pathways workers, acts as it (decision 0036)."""
    name = team_node_account_name(team) if team else "gke-np-sa"
    return f"{cluster}-{name}@{project}.iam.gserviceaccount.com"


def team_account(team: str | None) -> str:
    """The Kubernetes service account a run of ``team`` (None: no team) runs as."""
    return f"{TEAM_ACCOUNT_PREFIX}{team}" if team else NO_TEAM_ACCOUNT


def team_service_accounts(teams: Iterable[str], namespace: str) -> list[dict[str, object]]:
    """The Kubernetes service accounts of ``teams`` in ``namespace``: applied with the teams'
    queues (infra/kueue_objects.py), so a team whose queue exists has its account too (a
    pod naming an account that does not exist is never created: the ServiceAccount
    admission plugin refuses it). No annotation: the team's principal is the account itself
    (Workload Identity Federation's direct form)."""
    return [{"apiVersion": "v1", "kind": "ServiceAccount",
             "metadata": {"name": team_account(team), "namespace": namespace,
                          "labels": {"app.kubernetes.io/managed-by": "tpurl"}}}
            for team in teams]


def principal(project: str, namespace: str, account: str,
              project_number: str | None = None) -> str:
    """The IAM member of ``account``'s pods (Workload Identity Federation for GKE)."""
    return (f"principal://iam.googleapis.com/projects/{project_number or PROJECT_NUMBER}/"
            f"locations/global/workloadIdentityPools/{project}.svc.id.goog/subject/ns/"
            f"{namespace}/sa/{account}")


@dataclass(frozen=True)
class TeamGrant:
    """What one team's pods may do: its account, its member, the buckets it may write."""

    team: str  # "" for the profiles in no team
    account: str
    member: str
    buckets: tuple[str, ...]


@dataclass(frozen=True)
class Member:
    """A profile on the cluster: its name, team, project, namespace and bucket."""

    profile: str
    team: str | None
    project: str
    namespace: str
    bucket: str


def cluster_grants(members: Iterable[Member], project_number: str | None = None
                   ) -> list[TeamGrant]:
    """Pure: per team (then the team-less), the buckets of its profiles on the cluster."""
    by_team: dict[str, list[Member]] = {}
    for m in members:
        by_team.setdefault(m.team or "", []).append(m)
    out = []
    for team in sorted(by_team, key=lambda t: (t == "", t)):
        found = by_team[team]
        account = team_account(team or None)
        out.append(TeamGrant(team, account, principal(found[0].project, found[0].namespace,
                                                      account, project_number),
                             tuple(sorted({m.bucket for m in found}))))
    return out


def shared_bucket_issues(grants: Iterable[TeamGrant]) -> list[Issue]:
    """Pure: a bucket two teams (or a team and the team-less) may both write: their grants
    would not be disjoint, so one team's code could overwrite the other's checkpoints."""
    holders: dict[str, list[str]] = {}
    for grant in grants:
        for bucket in grant.buckets:
            holders.setdefault(bucket, []).append(grant.team or "(no team)")
    return [Issue("gke.bucket", f"gs://{bucket} is the bucket of teams {', '.join(teams)}: "
                  "each could overwrite or delete the other's checkpoints and records",
                  "give each team's profiles a bucket of their own (gke.bucket)",
                  Failure.CONFIG_TEAMS_FILE)
            for bucket, teams in holders.items() if len(teams) > 1]
