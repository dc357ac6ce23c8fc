"""Pre-flight of the Cloud Build path: the account Cloud Build runs the build as
must read the staged source, push to the image repository and write the build's logs.

Which account: the project's default build service account, read from Cloud Build itself
(``projects.locations.getDefaultServiceAccount``: the legacy ``NUMBER@cloudbuild.gserviceaccount
.com`` or, in projects created since 2024, the Compute Engine default account
``NUMBER-compute@developer.gserviceaccount.com``; empty when none is set). The build body names
no account (cloudbuild_spec.build_body), so that is the one used.

What it needs, each with the predefined roles that carry the permission (Google's IAM roles
reference) and the narrowest grant as the fix:
- the staged context, ``storage.objects.get`` on gs://PROJECT_cloudbuild;
- the push, ``artifactregistry.repositories.uploadArtifacts`` on the repository;
- the build log, ``logging.logEntries.create`` on the project.

Pure: facts in (policies as the IAM APIs return them, or the exception that reading raised),
``(status, found, fix, target)`` out, like access.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flows.backends.gke.image.cloudbuild_spec import staging_bucket
from flows.backends.gke.infra.iam import granted
from flows.backends.gke.infra.preflight.access import ar_repository
from flows.backends.gke.infra.preflight.results import Status

BUILDER = "roles/cloudbuild.builds.builder"  # the legacy account's role: all three below
BASIC = {"roles/owner", "roles/editor"}


@dataclass(frozen=True)
class Need:
    what: str
    permission: str
    roles: frozenset[str]
    scope: str  # "bucket", "repository" or "project": where the fix grants it
    role: str   # the narrowest predefined role, granted by the fix


NEEDS = (
    Need("read the staged source", "storage.objects.get", frozenset({
        "roles/storage.objectViewer", "roles/storage.objectUser", "roles/storage.objectAdmin",
        "roles/storage.admin", "roles/storage.legacyObjectReader",
        "roles/storage.legacyObjectOwner", BUILDER, *BASIC}), "bucket",
        "roles/storage.objectViewer"),
    Need("push the image", "artifactregistry.repositories.uploadArtifacts", frozenset({
        "roles/artifactregistry.writer", "roles/artifactregistry.repoAdmin",
        "roles/artifactregistry.admin", "roles/artifactregistry.createOnPushWriter",
        "roles/artifactregistry.createOnPushRepoAdmin", BUILDER, *BASIC}), "repository",
        "roles/artifactregistry.writer"),
    Need("write the build log", "logging.logEntries.create", frozenset({
        "roles/logging.logWriter", "roles/logging.admin", BUILDER, *BASIC}), "project",
        "roles/logging.logWriter"),
)


def account_email(value: str) -> str:
    """``projects/P/serviceAccounts/EMAIL`` (the API's form) → ``EMAIL``."""
    return value.rsplit("/", 1)[-1]


def grant_command(need: Need, project: str, account: str, image_repository: str) -> str:
    member = f"--member=serviceAccount:{account} --role={need.role}"
    if need.scope == "bucket":
        return (f"gcloud storage buckets add-iam-policy-binding gs://{staging_bucket(project)} "
                f"{member}")
    where = ar_repository(image_repository)
    if need.scope == "repository" and where:
        repo_project, location, name = where
        return (f"gcloud artifacts repositories add-iam-policy-binding {name} "
                f"--location={location} --project={repo_project} {member}")
    return f"gcloud projects add-iam-policy-binding {project} {member}"


def check_cloud_build_account(project: str, builder: str, image_repository: str,
                              account: Any, project_policy: Any, staging_policy: Any,
                              repository_policy: Any) -> tuple[Status, str, str, str]:
    """(status, found, fix, target). ``builder`` is image.builder: docker does not use Cloud
    Build (ok), cloud-build must (fail), auto uses it where no daemon answers (warn)."""
    target = (f"projects/{project} Cloud Build default service account, its roles on "
              f"projects/{project}, gs://{staging_bucket(project)} and {image_repository}")
    if builder == "docker":
        return ("ok", "image.builder is docker: Cloud Build is not used", "", target)
    short: Status = "fail" if builder == "cloud-build" else "warn"
    when = "" if builder == "cloud-build" else " (image.builder auto uses Cloud Build where " \
        "no Docker daemon answers)"
    if isinstance(account, Exception):
        return ("unknown", f"could not be read ({account})", "check it: gcloud builds "
                f"get-default-service-account --project={project}", target)
    if not account:
        return (short, f"{project} has no default Cloud Build service account{when}",
                "set one in Cloud Build's settings (console: Cloud Build → Settings → "
                "Service account), then rerun `tpurl plan --check`", target)
    email = account_email(str(account))
    member = f"serviceAccount:{email}"
    unread = [f"{name} ({fact})" for name, fact in (("project policy", project_policy),
              ("staging bucket policy", staging_policy),
              ("repository policy", repository_policy)) if isinstance(fact, Exception)]
    have = set()
    for fact in (project_policy, staging_policy, repository_policy):
        if isinstance(fact, dict):
            have |= granted(fact, member)
    missing = [n for n in NEEDS if not have & n.roles]
    if missing and unread:
        return ("unknown", f"{email}: could not read {', '.join(unread)}; from what was read "
                f"it lacks {', '.join(n.permission for n in missing)}", "; ".join(
                    grant_command(n, project, email, image_repository) for n in missing),
                target)
    if missing:
        lacks = ", ".join(f"{n.permission} to {n.what} (role {n.role})" for n in missing)
        return (short, f"Cloud Build runs as {email}, which lacks {lacks}{when}", "; ".join(
            grant_command(n, project, email, image_repository) for n in missing), target)
    return ("ok", f"Cloud Build runs as {email}: reads the staged source, pushes, writes logs",
            "", target)
