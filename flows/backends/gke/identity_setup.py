"""``tpurl flow-identity PROFILE [--identity runtime|infra|both]``: the shell script that
creates the two Google identities of flows/backends/gke/identity.py with their roles.

The runtime identity is the profile's team's (``tpurl-flow-TEAM``, flows/backends/gke/
flow_pools.py), granted that profile's bucket: run for each profile of a team, the team's
account holds the team's buckets and no other team's. A profile in no team: ``tpurl-flow``.

Run once by someone who may create service accounts and grant roles (a project owner or
IAM admin); pipe it to sh. Both by default: the infra identity first (it is the one that can
deploy), then the runtime one, whose grants sit on the resources themselves wherever IAM
allows it (the bucket, Cloud Build's staging bucket, the image repository), which the script
creates when missing, so that the grants have something to sit on.

Pure: the lines are computed from the profile; nothing here runs them.
"""

from __future__ import annotations

from typing import Literal

from flows.backends.gke import identity
from flows.backends.gke.flow_pools import flow_account_id, pool_name
from flows.backends.gke.gcs import split_uri
from flows.backends.gke.image.cloudbuild_spec import staging_bucket
from flows.backends.gke.infra.preflight.access import OPERATOR_PERMISSIONS, ar_repository
from flows.config.gke_section import gke_section
from flows.config.profile import Profile
from flows.config.secret_ref import secret_refs
from flows.core.layout import patched_image_ref
from flows.core.spend_ledger import team_ledger

Which = Literal["runtime", "infra", "both"]


def infra_roles() -> list[str]:
    """The infra identity's project roles: those behind the permissions pre-flight tests
    (preflight/access.py OPERATOR_PERMISSIONS)."""
    return sorted(set(OPERATOR_PERMISSIONS.values()))


def repository_of(profile: Profile) -> tuple[str, str, str] | None:
    """(project, location, name) of the image repository when it is Artifact Registry."""
    return ar_repository(patched_image_ref(profile).rsplit(":", 1)[0])


def staging_of(profile: Profile) -> str:
    """Cloud Build's staging bucket, when the image stage may build with Cloud Build."""
    return ("" if profile.image.builder == "docker"
            else staging_bucket(gke_section(profile).project))


def _create_account(email: str, name: str, project: str, title: str) -> str:
    """Idempotent, like every line of the script: a second run changes nothing."""
    return (f"gcloud iam service-accounts describe {email} --project={project} >/dev/null 2>&1"
            f" || gcloud iam service-accounts create {name} --project={project} "
            f"--display-name='{title}'")


def _infra(profile: Profile) -> list[str]:
    gke = gke_section(profile)
    account = identity.infra_account(gke)
    return [
        "# the infra identity: deploys the cluster and grants IAM; used once, never by a run",
        _create_account(account, identity.INFRA_ACCOUNT, gke.project,
                        "tpurl infra (cluster deploy, IAM; operator only)"),
        *(f"gcloud projects add-iam-policy-binding {gke.project} "
          f"--member=serviceAccount:{account} --role={role} --condition=None"
          for role in infra_roles()),
        f"# deploy with it: gcloud config set auth/impersonate_service_account {account}",
        "# (you need roles/iam.serviceAccountTokenCreator on it), then `tpurl run PROFILE` once,",
        "# or run the infra/teardown deployment's process worker as it",
    ]


LEDGER_ROLES = ("roles/storage.objectViewer", "roles/storage.objectCreator")


def ledger_condition(ledger_root: str, team: str) -> str:
    """The IAM condition that holds a team's ledger grants to the team's own objects on a
    bucket teams may share (pure): its objects by name, and listing only under its prefix
    (Cloud Storage checks ``storage.objects.list`` on the bucket; IAM Conditions give the
    list's prefix as the API attribute ``storage.googleapis.com/objectListPrefix``, and an
    object's ``resource.name`` as ``projects/_/buckets/BUCKET/objects/NAME``: IAM's
    "Attribute reference for IAM Conditions"). So no team's flow reads, or adds to, another
    team's spend: an entry of B's filed by A's flow would replace B's estimate."""
    bucket, path = split_uri(team_ledger(ledger_root, team))
    prefix = path + "/"
    return (f'(resource.type == "storage.googleapis.com/Object" && resource.name.startsWith('
            f'"projects/_/buckets/{bucket}/objects/{prefix}")) || (resource.type == '
            f'"storage.googleapis.com/Bucket" && api.getAttribute('
            f'"storage.googleapis.com/objectListPrefix", "").startsWith("{prefix}"))')


SECRET_ACCESSOR = "roles/secretmanager.secretAccessor"


def _secret_grants(profile: Profile, account: str) -> list[str]:
    """Read access to each Secret Manager secret the profile names (``{gcp_secret: NAME}``),
    on that secret alone: a project grant of the accessor role would give every team's flow
    every team's secrets."""
    project = gke_section(profile).project
    names = sorted({ref.gcp_secret for _, ref in secret_refs(profile) if ref.gcp_secret})
    return [*(["# the Secret Manager secrets the profile names, each on its own"] if names
              else []),
            *(f"gcloud secrets add-iam-policy-binding {name} --project={project} "
              f"--member=serviceAccount:{account} --role={SECRET_ACCESSOR}" for name in names)]


def _ledger_grants(ledger_root: str, team: str | None, account: str) -> list[str]:
    """The flow's grants on its team's ledger: held to the team's prefix by a condition,
    written to a file first (gcloud's ``--condition`` splits its value at commas, which the
    expression holds); a condition needs the bucket's uniform bucket-level access."""
    if team is None:  # no team, no budget: a run of a profile in no team writes no ledger
        return []
    ledger = split_uri(ledger_root)[0]
    title = f"tpurl ledger of team {team}"
    return [
        "# the team's spend ledger, only its own entries (docs/how-to/team-budgets.md); the "
        "bucket needs uniform bucket-level access",
        "condition=$(mktemp)",
        f"printf '%s\\n' 'title: {title}' "
        f"'expression: {ledger_condition(ledger_root, team)}' > \"$condition\"",
        *(f"gcloud storage buckets add-iam-policy-binding gs://{ledger} "
          f"--member=serviceAccount:{account} --role={role} "
          '--condition-from-file="$condition"' for role in LEDGER_ROLES),
        'rm -f "$condition"',
    ]


def _runtime(profile: Profile, team: str | None, ledger_root: str | None) -> list[str]:
    gke = gke_section(profile)
    account = identity.flow_account(gke, team)
    kubernetes_account = flow_account_id(team)
    staging, repo = staging_of(profile), repository_of(profile)
    repository = "/".join(repo) if repo else ""
    whose = (f"team {team}'s flow pods (pool {pool_name(team)}; run this for each profile of "
             "the team: each adds its bucket)" if team else
             f"the flow pods of profiles in no team (pool {pool_name(None)})")
    lines = [
        f"# the runtime identity of {whose}: its bucket, its repository, the cluster",
        _create_account(account, kubernetes_account, gke.project,
                        f"tpurl flow ({pool_name(team)})"),
        f"gcloud storage buckets describe gs://{gke.bucket} >/dev/null 2>&1 || gcloud storage "
        f"buckets create gs://{gke.bucket} --project={gke.project} --location={gke.region} "
        "--uniform-bucket-level-access",
    ]
    if staging:
        lines.append(f"gcloud storage buckets describe gs://{staging} >/dev/null 2>&1 || "
                     f"gcloud storage buckets create gs://{staging} --project={gke.project} "
                     f"--location={gke.region} --uniform-bucket-level-access")
    if repo:
        lines.append(f"gcloud artifacts repositories describe {repo[2]} --location={repo[1]} "
                     f"--project={repo[0]} >/dev/null 2>&1 || gcloud artifacts repositories "
                     f"create {repo[2]} --repository-format=docker --location={repo[1]} "
                     f"--project={repo[0]}")
    for need in identity.NEEDS:
        if (need.scope == "staging" and not staging) or (need.scope == "repository"
                                                         and not repo):
            continue  # docker builds; or another registry, used as is
        resource = staging if need.scope == "staging" else repository
        lines.append(identity.grant_command(gke, need, resource, account))
    lines += _secret_grants(profile, account)
    if ledger_root and ledger_root.startswith("gs://"):
        lines += _ledger_grants(ledger_root, team, account)
    lines.append(f"gcloud iam service-accounts add-iam-policy-binding {account} "
                 f"--project={gke.project} --role=roles/iam.workloadIdentityUser "
                 f"--member='serviceAccount:{gke.project}.svc.id.goog"
                 f"[{gke.namespace}/{kubernetes_account}]'")
    return list(dict.fromkeys(lines))  # one line per role and place


def setup_commands(profile: Profile, which: Which = "both", team: str | None = None,
                   ledger_root: str | None = None) -> list[str]:
    """The script (``set -e`` first): the infra identity, the runtime identity of the
    profile's ``team`` (None: a profile in no team), with the team's ``ledger_root``'s
    bucket to read and create in, or both."""
    return ["set -e", *(_infra(profile) if which in ("infra", "both") else []),
            *(_runtime(profile, team, ledger_root) if which in ("runtime", "both") else [])]
