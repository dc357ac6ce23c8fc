"""Can every GKE stage run where this flow runs? Checked at the flow's start, before any
side effect, so a Kubernetes work pool without gcloud or a Docker daemon refuses with the
reason and the fix instead of failing after the image was built and billed time began.

Decision: every stage is checked, skipped or not. Whether a stage skips is known only when
its turn comes (its record is read then, and an upstream rerun changes it), so a check of
"the stages that will run" would pass today and fail mid-run tomorrow; the environment is
the deployment's, and it must be able to run the whole flow.

What each stage calls (read from the code, not assumed):
- image: a Docker daemon (image.builder docker; auto uses one when it answers) or Cloud
  Build with Google credentials (cloud-build, or auto without a daemon); Google credentials
  also to create the Artifact Registry repository when the image goes there;
- infra: ``gcloud`` on PATH (get-credentials, IAM bindings, docker auth:
  infra/provision.py) and Google credentials (infra/clients.py); ``gcluster`` comes from the
  pinned Cluster Toolkit bundle (infra/bundle.py) and fetches ``terraform`` and ``packer``
  itself (``--download-dependencies``) when they are missing or older than it pins, so
  neither needs to be on PATH (the flow image ships gcluster's versions, so a pod fetches
  nothing);
- convert, train, export: the Kubernetes API, reached through the kube context infra writes;
- every stage: the runtime identity's Google permissions (flows/backends/gke/identity.py
  ``NEEDS``), held by the identity the flow runs as (read with testIamPermissions from that
  identity). Deploying the cluster is the infra identity's: the infra stage's pre-flight
  tests those permissions (infra/preflight/access.py) when, and only when, it must deploy.

``start_issues`` is pure (the facts come in an :class:`Environment`); ``probe`` gathers them.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from flows.backends.gke.image.builder import choose_builder, docker_host
from flows.common.failure_codes import Failure
from flows.common.issues import Issue
from flows.config.gke_section import gke_section
from flows.config.profile import Profile

if TYPE_CHECKING:
    from flows.backends.gke.infra.cloud import GoogleApis

K8S_FIX = ("use the flow image built with CLOUD_TOOLS=1 (images/flow), or run this deployment "
           "on a process work pool whose machine has it")


@dataclass(frozen=True)
class Environment:
    on_path: frozenset[str]
    docker_daemon: bool
    docker_host: str
    infra_credentials: str | None      # None: usable; else why not
    cloud_build_credentials: str | None
    in_kubernetes: bool
    # What the flow's own Google identity holds on the project (testIamPermissions), read
    # with the credentials the flow has; None: not read (no credentials, or the call failed).
    flow_permissions: frozenset[str] | None = None
    flow_identity: str = ""


def start_issues(profile: Profile, env: Environment, team: str | None = None) -> list[Issue]:
    """Pure: what the stages of ``profile`` need and ``env`` lacks, each with its fix; a
    missing runtime grant is offered to the run's ``team``'s flow account (None: a profile in
    no team's, ``tpurl-flow``)."""
    issues: list[Issue] = []
    builder = choose_builder(profile.image.builder, env.docker_daemon)
    if builder == "docker" and not env.docker_daemon:
        fix = ("set image.builder: cloud-build (or auto) to build with Cloud Build"
               if env.in_kubernetes else
               "start a daemon (bash scripts/docker-services.sh start, then export the "
               "DOCKER_HOST it prints), or set image.builder: cloud-build")
        issues.append(Issue("image.builder", f"stage image: builder docker, but no Docker daemon "
                                             f"answers at {env.docker_host}", fix,
                            Failure.ENVIRONMENT_NO_DOCKER_DAEMON))
    if builder == "cloud-build" and env.cloud_build_credentials is not None:
        why = ("no Docker daemon answers, so image.builder auto chose Cloud Build, and "
               if profile.image.builder == "auto" else "")
        issues.append(Issue("image.builder", f"stage image: {why}Cloud Build cannot be reached: "
                                             f"{env.cloud_build_credentials}",
                            "run `gcloud auth application-default login` or give the flow's pod "
                            "a Workload Identity service account; or provide a Docker daemon "
                            "and set image.builder: docker",
                            Failure.ENVIRONMENT_NO_CLOUD_BUILD))
    if "gcloud" not in env.on_path:
        fix = K8S_FIX if env.in_kubernetes else (
            "install the Google Cloud CLI (https://cloud.google.com/sdk/docs/install) and run "
            "`gcloud auth login`")
        issues.append(Issue("stage infra", "`gcloud` is not on PATH (infra runs gcloud "
                                           "container clusters get-credentials, IAM bindings "
                                           "and docker auth)", fix, Failure.ENVIRONMENT_NO_GCLOUD))
    if env.infra_credentials is not None:
        issues.append(Issue("stage infra", f"no Google credentials: {env.infra_credentials}",
                            "run `gcloud auth application-default login`, or give the flow's "
                            "pod a Workload Identity service account",
                            Failure.ENVIRONMENT_NO_GOOGLE_CREDENTIALS))
    if env.flow_permissions is not None and profile.gke is not None:
        from flows.backends.gke.identity import identity_issues
        from flows.backends.gke.identity_setup import repository_of, staging_of

        repo = repository_of(profile)
        issues += identity_issues(profile.gke, env.flow_identity, env.flow_permissions, builder,
                                  staging_of(profile), "/".join(repo) if repo else "",
                                  team)
    return issues


def probe(profile: Profile) -> Environment:
    """The facts ``start_issues`` needs, read without changing anything."""
    from flows.backends.gke.image.builder import daemon_answers

    daemon = daemon_answers()
    builder = choose_builder(profile.image.builder, daemon)
    infra = _infra_credentials(profile)
    held, who = _flow_permissions(profile) if infra is None else (None, "no credentials")
    return Environment(
        flow_permissions=held, flow_identity=who,
        on_path=frozenset(name for name in ("gcloud",) if shutil.which(name)),
        docker_daemon=daemon, docker_host=docker_host(),
        infra_credentials=infra,
        cloud_build_credentials=_cloud_build_credentials(profile) if builder == "cloud-build"
        else None,
        in_kubernetes=bool(os.environ.get("KUBERNETES_SERVICE_HOST")))


def _flow_permissions(profile: Profile) -> tuple[frozenset[str] | None, str]:
    """What the flow's Google identity (application default credentials: a pod's Workload
    Identity account, or the operator's login) holds of flows/backends/gke/identity.py's
    permissions; (None, why) when it cannot be read, which refuses nothing here: the
    credentials check above and pre-flight report that."""

    try:
        import google.auth

        from flows.backends.gke.infra.cloud import RestGoogleApis

        credentials, _ = google.auth.default(
            scopes=["https://www.googleapis.com/auth/cloud-platform"])
        who = str(getattr(credentials, "service_account_email", "") or "")
        held = held_permissions(RestGoogleApis(_session(credentials)), profile)
    except Exception as exc:  # no credentials, no network: not known, not refused
        return None, f"unknown ({type(exc).__name__})"
    if who in ("", "default"):
        who = "the application default credentials"
    return held, who


def held_permissions(apis: GoogleApis, profile: Profile) -> frozenset[str]:
    """What the caller holds of identity.NEEDS (the runtime identity's): on the project, and
    on the profile's bucket, Cloud Build's staging bucket and the image repository where they
    exist (a grant on the resource alone is least privilege, and the project's answer cannot
    see it)."""
    from flows.backends.gke import identity
    from flows.backends.gke.identity_setup import repository_of, staging_of

    gke = gke_section(profile)
    project = apis.test_iam_permissions(gke.project, identity.permissions())
    bucket = _resource_answer(apis.bucket_test_iam_permissions, gke.bucket,
                              identity.permissions("bucket"))
    staging = (_resource_answer(apis.bucket_test_iam_permissions, staging_of(profile),
                                identity.permissions("staging")) if staging_of(profile) else None)
    repository: set[str] | None = None
    if (found := repository_of(profile)) is not None:
        repository = _resource_answer(apis.repository_test_iam_permissions, *found,
                                      identity.permissions("repository"))
    return identity.held_with_resources(project, bucket, repository, staging)


def _resource_answer(call: Any, *args: Any) -> set[str] | None:
    """A resource's testIamPermissions answer; None when it does not exist yet (then only
    the project's grant counts)."""
    from flows.backends.gke.infra.cloud import ApiNotFound

    try:
        return set(call(*args))
    except (ApiNotFound, LookupError):
        return None


def _session(credentials: object) -> object:
    from google.auth.transport.requests import AuthorizedSession

    return AuthorizedSession(credentials)


def _infra_credentials(profile: Profile) -> str | None:
    from flows.backends.gke.infra import clients
    from flows.backends.gke.infra.settings import settings_from_profile
    from flows.core.failures import StageFailed

    try:
        clients.default_clients(settings_from_profile(profile))
    except StageFailed as exc:
        return exc.diagnosis.summary
    return None


def _cloud_build_credentials(profile: Profile) -> str | None:
    from flows.backends.gke.image import cloudbuild
    from flows.backends.gke.image.errors import ImageError

    try:
        cloudbuild.default_clients(gke_section(profile).project)
    except ImageError as exc:
        return str(exc).splitlines()[0]
    return None
