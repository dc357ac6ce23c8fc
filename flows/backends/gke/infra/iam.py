"""Who may touch the bucket, and docker auth: the tutorial's grants, made idempotent.

Two modes (``gke.iam_mode``):
- ``project-storage-admin`` (the tutorial): roles/storage.admin on the whole project for the
  workload (CLUSTER-gke-wl-sa) and node pool (CLUSTER-gke-np-sa) accounts. Every bucket of
  the project becomes writable (and deletable) by every pod of the cluster.
- ``bucket-scoped`` (recommended, least privilege): roles/storage.objectAdmin plus
  roles/storage.legacyBucketReader on the pipeline's bucket only, to two members: the
  profile's team principal (its pods: the training program with the team's reward
  functions, conversion, export; flows/backends/gke/team_identity.py) and the node pool's
  account (the Pathways workers, on the host's network, write the team's checkpoints and
  scratch there; they run Google's pinned server image, no team code). A team's TPU pools
  run as a node account of the team's own (``CLUSTER-np-<digest>``, made by the blueprint:
  decision 0036), so two teams on one cluster hold disjoint grants, node accounts included;
  profiles in no team share the example's node account.
  legacyBucketReader is there for ``storage.buckets.get``: without it MaxText/Orbax report a
  misleading "bucket not found" (objectAdmin lacks that permission).

Idempotent by reading first: only missing bindings are granted, so a second run changes
nothing and runs no gcloud command.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from flows.backends.gke.infra.commands import bucket_binding_argv, docker_auth_argv, project_binding_argv
from flows.backends.gke.infra.settings import InfraSettings

# Predefined roles that carry storage.buckets.get (custom roles are not resolved here).
ROLES_WITH_BUCKETS_GET = frozenset({
    "roles/storage.admin", "roles/storage.legacyBucketReader", "roles/storage.legacyBucketWriter",
    "roles/storage.legacyBucketOwner", "roles/storage.bucketViewer", "roles/owner",
    "roles/editor"})
BUCKET_SCOPED_ROLES = ("roles/storage.objectAdmin", "roles/storage.legacyBucketReader")


@dataclass(frozen=True)
class Binding:
    scope: Literal["project", "bucket"]
    resource: str  # project id or bucket name
    member: str
    role: str

    def argv(self) -> list[str]:
        if self.scope == "project":
            return project_binding_argv(self.resource, self.member, self.role)
        return bucket_binding_argv(self.resource, self.member, self.role)


def node_member(s: InfraSettings) -> str:
    """The account the profile's TPU nodes run as: its team's own (team_identity.py
    node_account), else the example's node pool account."""
    from flows.backends.gke.team_identity import node_account

    return f"serviceAccount:{node_account(s.gke.project, s.gke.cluster, s.team)}"


def members(s: InfraSettings) -> tuple[str, str]:
    """Who writes the bucket: the team's pods, then the team's nodes' (the Pathways
    workers, on the host's network, act as the node account of the pool they run on)."""
    if s.gke.iam_mode == "bucket-scoped":
        return s.team_member, node_member(s)
    return f"serviceAccount:{s.gke.workload_service_account}", node_member(s)


def desired_bindings(s: InfraSettings) -> list[Binding]:
    if s.gke.iam_mode == "bucket-scoped":
        return [Binding("bucket", s.gke.bucket, m, role) for m in members(s)
                for role in BUCKET_SCOPED_ROLES]
    return [Binding("project", s.gke.project, m, "roles/storage.admin") for m in members(s)]


def granted(policy: dict[str, Any], member: str) -> set[str]:
    """Roles bound to ``member`` without a condition (a conditional grant may not apply)."""
    return {b["role"] for b in policy.get("bindings", [])
            if _key(member) in {_key(m) for m in b.get("members", [])}
            and not b.get("condition")}


_PROJECT_NUMBER = re.compile(r"^(principal://iam\.googleapis\.com/projects/)[^/]+(/locations/"
                             r"global/workloadIdentityPools/)")


def _key(member: str) -> str:
    """A member as compared: a team principal without its project number, which a plan or a
    check before the infra stage cannot know; its pool (``PROJECT.svc.id.goog``) names the
    project already."""
    return _PROJECT_NUMBER.sub(r"\1-\2", member)


def missing_bindings(wanted: list[Binding], project_policy: dict[str, Any],
                     bucket_policy: dict[str, Any]) -> list[Binding]:
    out = []
    for binding in wanted:
        policy = project_policy if binding.scope == "project" else bucket_policy
        if binding.role not in granted(policy, binding.member):
            out.append(binding)
    return out


def registries(s: InfraSettings) -> list[str]:
    return ["gcr.io", f"{s.gke.region}-docker.pkg.dev"]


def docker_config_path(environ: dict[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    base = env.get("DOCKER_CONFIG") or os.path.join(os.path.expanduser("~"), ".docker")
    return Path(base) / "config.json"


def missing_registries(config: dict[str, Any], wanted: list[str]) -> list[str]:
    helpers = config.get("credHelpers") or {}
    return [r for r in wanted if helpers.get(r) != "gcloud"]


def docker_auth_commands(s: InfraSettings, config_path: Path | None = None) -> list[list[str]]:
    path = config_path or docker_config_path()
    config = json.loads(path.read_text()) if path.is_file() else {}
    return [docker_auth_argv(r) for r in missing_registries(config, registries(s))]
