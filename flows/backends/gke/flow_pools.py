"""Who a team's flow pod is: its own Kubernetes work pool, Kubernetes service account, Google
account, Role and HF token Secret, generated per team of deployments/teams.yaml.

Why a pool per team (docs/decisions/0039-a-flow-identity-per-team.md): the flow pod's
service account is fixed in the pool's base job template, never a variable, so that no run
chooses whom its flow acts as (docs/threat-model.md, "A run-only member"). One pool for
every team therefore means one identity for every team: ``tpurl-flow``, whose Role had to
name every team's Secrets and whose Google account every team's ``tpurl flow-identity``
granted its bucket. A pool per team keeps the account fixed by the operator and makes it
the team's: ``tpurl-kubernetes-TEAM`` runs its flow pods as ``tpurl-flow-TEAM`` (Kubernetes
and Google), whose Role may replace only the team's Secrets and whose pod reads ``HF_TOKEN`` and
``WANDB_API_KEY`` from the team's own ``tpurl-team-TEAM-hf-token`` and
``tpurl-team-TEAM-wandb-api-key``, and the dispatcher's sealing key from
``tpurl-team-TEAM-dispatch-key`` (announcements/seal.py). A profile in no team keeps the shared
``tpurl-kubernetes`` pool and ``tpurl-flow`` (deployments/work-pool/rbac.yaml, the
team-less Role).

The team's files are generated from the shared ones (the base job template and rbac.yaml's
Role, ClusterRole and comments), so the per-team Role grants exactly the calls the backend
makes (tests/backends/gke/test_rbac.py derives those) and names only the team's Secrets:
``python -m flows.backends.gke.flow_pools`` writes deployments/work-pool/teams/TEAM/ for
every team of the teams file, ``--check`` says which file differs. Beside them, the team's
JobSet admission policy (jobset_admission.py, decision 0040) allows the same Secrets its
Role may update; the team-less ``tpurl-flow`` gets one too (deployments/work-pool/
admission.yaml).

Pure but for reading the shared files and writing the team's.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from flows.announcements.seal import KEY_ENV, SECRET_NAME_ENV, pool_key_secret
from flows.backends.gke.jobs.naming import secret_name
from flows.backends.gke.jobset_admission import team_policy, teamless_policy
from flows.common.paths import REPO_ROOT
from flows.core.secrets import POD_SECRETS, team_pool_secret

WORK_POOL = REPO_ROOT / "deployments" / "work-pool"
BASE_TEMPLATE = WORK_POOL / "kubernetes-base-job-template.json"
SHARED_RBAC = WORK_POOL / "rbac.yaml"
TEAM_DIR = WORK_POOL / "teams"
TEMPLATE_NAME = "kubernetes-base-job-template.json"
RBAC_NAME = "rbac.yaml"
ADMISSION_NAME = "admission.yaml"

SHARED_POOL = "tpurl-kubernetes"   # profiles in no team
SHARED_ACCOUNT = "tpurl-flow"      # their flow pod's Kubernetes and Google account
FLOW_CONTAINER = "prefect-job"
# A Google service account's id: 6 to 30 characters, a lowercase letter first, then
# lowercase letters, digits and '-', not ending in '-' (IAM, "Create service accounts").
ACCOUNT_ID_MAX = 30
_DIGEST = 6
# The sources a team's Secrets come from, besides what its profiles name: the shipped
# profiles' HF token (env:HF_TOKEN), the Prefect Secret block docs/how-to/identities.md
# offers in its place, and the W&B key of docs/integrations/wandb.md.
DOCUMENTED_SOURCES = ("env:HF_TOKEN", "prefect-secret:hf-token", "env:WANDB_API_KEY")


def flow_account_id(team: str | None) -> str:
    """The flow pod's Kubernetes service account and Google account id of ``team`` (None: a
    profile in no team). ``tpurl-flow-TEAM`` while it fits the Google id's 30 characters;
    a longer name keeps its start and gains 6 hex digits of its SHA-256, so two long names
    sharing a start never share an account. Team names are RFC 1123 labels
    (flows/config/teams.py), so the id is one too."""
    if not team:
        return SHARED_ACCOUNT
    full = f"{SHARED_ACCOUNT}-{team}"
    if len(full) <= ACCOUNT_ID_MAX:
        return full
    digest = hashlib.sha256(team.encode()).hexdigest()[:_DIGEST]
    head = full[:ACCOUNT_ID_MAX - _DIGEST - 1].rstrip("-")
    return f"{head}-{digest}"


def google_account(team: str | None, project: str) -> str:
    return f"{flow_account_id(team)}@{project}.iam.gserviceaccount.com"


def pool_name(team: str | None) -> str:
    return f"{SHARED_POOL}-{team}" if team else SHARED_POOL


def flow_pod_secrets(team: str | None) -> str:
    """The Secrets the team's flow pod reads its pool's variables from (the operator creates
    them), as the plan and the Role's header say them. Never one of the workload Secrets
    jobs/naming.py names: those end in a hex digest."""
    return ", ".join(f"{variable} from the Secret {team_pool_secret(variable, team)}"
                     for variable in POD_SECRETS)


def plan_lines(team: str | None, project: str) -> list[str]:
    """What ``tpurl plan`` says of who the run's flow pod is: its pool, its Kubernetes and
    Google account, the Role it is bound to and the Secrets it reads its tokens from."""
    who = f"team {team}'s" if team else "a profile in no team's"
    return [f"The flow pod ({who}): pool {pool_name(team)}, Kubernetes service account "
            f"{flow_account_id(team)} bound to {google_account(team, project)} (`tpurl "
            f"flow-identity PROFILE --identity runtime` grants it this profile's bucket), Role "
            f"{flow_account_id(team)} of {shown(rbac_file(team))}, "
            f"{flow_pod_secrets(team)}"]


def template_file(team: str | None) -> Path:
    return TEAM_DIR / team / TEMPLATE_NAME if team else BASE_TEMPLATE


def rbac_file(team: str | None) -> Path:
    return TEAM_DIR / team / RBAC_NAME if team else SHARED_RBAC


def admission_file(team: str | None) -> Path:
    return TEAM_DIR / team / ADMISSION_NAME if team else WORK_POOL / ADMISSION_NAME


def rbac_file_of_account(account: str) -> Path:
    """The Role file of the flow account ``account`` (a shipped team's, else the shared
    one): matched through the team's account name, which a long team name shortens."""
    teams = sorted(d.name for d in TEAM_DIR.iterdir()) if TEAM_DIR.is_dir() else []
    return next((rbac_file(t) for t in teams if flow_account_id(t) == account), SHARED_RBAC)


def pool_template_shown(pool: str) -> str:
    """The shipped template a Kubernetes pool is created from, by the pool's name."""
    team = pool.removeprefix(f"{SHARED_POOL}-") if pool.startswith(f"{SHARED_POOL}-") else None
    return shown(template_file(team))


def shown(path: Path) -> str:
    """``path`` as the docs and fixes name it: from the repository's root."""
    return str(path.relative_to(REPO_ROOT)) if path.is_relative_to(REPO_ROOT) else str(path)


def profile_sources(profile: str) -> list[str]:
    """The secret sources a shipped profile's file names (its HF token, its trackers' keys),
    read from the file and its bases, unvalidated: what its runs write Secrets of."""
    from flows.config.loading import shipped_profile_path
    from flows.config.profile_file import read_profile_file
    from flows.config.secret_ref import SecretRef

    raw = read_profile_file(shipped_profile_path(profile))
    refs = [(raw.get("model") or {}).get("hf_token"),
            *((tracker or {}).get("api_key") for tracker in (raw.get("tracking") or {}).values()
              if isinstance(tracker, dict))]
    return [SecretRef.model_validate(ref).describe() for ref in refs if isinstance(ref, dict)]


def sources_of(profiles: Iterable[str]) -> list[str]:
    """The documented sources, then those the team's profiles name."""
    return list(dict.fromkeys([*DOCUMENTED_SOURCES,
                               *(s for p in profiles for s in profile_sources(p))]))


def team_secrets(team: str, sources: Iterable[str] = DOCUMENTED_SOURCES) -> list[str]:
    """The workload Secrets the team's Role may replace: one per source, owned by the team
    (jobs/secret_objects.py ``owner_of``)."""
    return list(dict.fromkeys(secret_name(f"team:{team}", s) for s in sources))


def team_template(base: dict[str, Any], team: str) -> dict[str, Any]:
    """The shared base job template with the team's service account and token Secrets in
    the places the shared one fixes them; nothing else changes."""
    out = copy.deepcopy(base)
    pod = out["job_configuration"]["job_manifest"]["spec"]["template"]["spec"]
    pod["serviceAccountName"] = flow_account_id(team)
    (flow,) = [c for c in pod["containers"] if c.get("name") == FLOW_CONTAINER]
    for env in flow["env"]:
        if env["name"] in POD_SECRETS:
            env["valueFrom"]["secretKeyRef"]["name"] = team_pool_secret(env["name"], team)
        elif env["name"] == KEY_ENV:  # the dispatcher's seal: another team's forges nothing
            env["valueFrom"]["secretKeyRef"]["name"] = pool_key_secret(team)
        elif env["name"] == SECRET_NAME_ENV:
            env["value"] = pool_key_secret(team)
    variables = out["variables"]
    variables["description"] = variables["description"].replace(
        f"the service account ({SHARED_ACCOUNT})",
        f"the service account ({flow_account_id(team)}, team {team}'s: "
        "deployments/work-pool/teams/TEAM/ are generated by `python -m "
        "flows.backends.gke.flow_pools`)").replace(
        f"prefect work-pool update {SHARED_POOL} --base-job-template "
        f"deployments/work-pool/{TEMPLATE_NAME}",
        f"prefect work-pool update {pool_name(team)} --base-job-template "
        f"{shown(template_file(team))}")
    return out


def _shared_documents(path: Path = SHARED_RBAC) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _without_secret_updates(rules: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rules if not ("secrets" in (r.get("resources") or [])
                                     and "update" in (r.get("verbs") or []))]


def team_rbac(team: str, sources: Iterable[str] = DOCUMENTED_SOURCES,
              namespace: str = "default", shared: Path = SHARED_RBAC
              ) -> list[dict[str, Any]]:
    """The team's ServiceAccount (bound by Workload Identity to its Google account), Role
    (rbac.yaml's, its Secret update rule naming the team's Secrets only), RoleBinding, and a
    ClusterRoleBinding of rbac.yaml's ClusterRole (nodes, ClusterQueues: read only)."""
    account = flow_account_id(team)
    docs = _shared_documents(shared)
    (role,) = [d for d in docs if d["kind"] == "Role"]
    (cluster_role,) = [d for d in docs if d["kind"] == "ClusterRole"]
    rules = [*_without_secret_updates(copy.deepcopy(role["rules"])),
             {"apiGroups": [""], "resources": ["secrets"],
              "resourceNames": team_secrets(team, sources), "verbs": ["update"]}]
    subject = {"kind": "ServiceAccount", "name": account, "namespace": namespace}
    meta = {"name": account, "namespace": namespace,
            "labels": {"app.kubernetes.io/managed-by": "tpurl", "tpurl/team": team}}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {**meta, "annotations": {"iam.gke.io/gcp-service-account":
                                              google_account(team, "PROJECT")}}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta,
         "rules": rules},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": meta,
         "subjects": [subject], "roleRef": {"apiGroup": "rbac.authorization.k8s.io",
                                            "kind": "Role", "name": account}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": account, "labels": meta["labels"]},
         "subjects": [subject], "roleRef": {"apiGroup": "rbac.authorization.k8s.io",
                                            "kind": "ClusterRole",
                                            "name": cluster_role["metadata"]["name"]}},
    ]


def rbac_text(team: str, sources: Iterable[str] = DOCUMENTED_SOURCES) -> str:
    head = "".join(f"# {line}\n" for line in (
        f"Team {team}'s flow pod on the cluster. Generated by",
        "`python -m flows.backends.gke.flow_pools` from deployments/work-pool/rbac.yaml (its",
        "Role's rules and its ClusterRole: the comments there say why each is granted); do",
        "not edit. The team's pool runs its flow pods as this account, which may replace only",
        "the team's own Secrets; Workload Identity binds it to the Google account below",
        "(replace PROJECT), which `tpurl flow-identity PROFILE --identity runtime | sh` creates",
        "for a profile of the team, granted that profile's bucket.",
        f"Pool: {pool_name(team)}. Account: {flow_account_id(team)}.",
        "The flow pod reads its tokens from these Secrets (each optional: a run whose profile",
        "references the variable refuses to start without it):",
        *(f"  kubectl create secret generic {team_pool_secret(variable, team)} -n default "
          f"--from-literal=value=${variable}" for variable in POD_SECRETS)))
    return head + yaml.safe_dump_all(team_rbac(team, sources), sort_keys=False, width=100)


def admission_text(team: str, sources: Iterable[str] = DOCUMENTED_SOURCES) -> str:
    """The team's JobSet admission policy (jobset_admission.py), allowing the Secrets its
    Role may update."""
    head = "".join(f"# {line}\n" for line in (
        f"What team {team}'s flow account ({flow_account_id(team)}) may put in a JobSet: its",
        f"pods run as tpurl-team-{team} (or default), name only the team's Secrets, and land",
        "only on the team's pools. Generated by `python -m flows.backends.gke.flow_pools`",
        "(flows/backends/gke/jobset_admission.py says why each rule); do not edit.",
        "Needs Kubernetes 1.30+ (admissionregistration.k8s.io/v1); an older API server refuses",
        "the apply, and then nothing limits what the team's JobSets run as.",
        f"  kubectl apply -f deployments/work-pool/teams/{team}/{ADMISSION_NAME}"))
    docs = team_policy(team, flow_account_id(team), team_secrets(team, sources))
    return head + yaml.safe_dump_all(docs, sort_keys=False, width=100)


def teamless_admission_text() -> str:
    """The JobSet admission policy of the flow account of profiles in no team."""
    head = "".join(f"# {line}\n" for line in (
        f"What the flow account of profiles in no team ({SHARED_ACCOUNT}) may put in a JobSet:",
        "its pods run as the namespace's default, name only Secrets of profiles in no team",
        "(tpurl-profile-...), mount nothing of the node, and land on no team's pools.",
        "Generated by `python -m flows.backends.gke.flow_pools`",
        "(flows/backends/gke/jobset_admission.py says why each rule); do not edit.",
        "Needs Kubernetes 1.30+ (admissionregistration.k8s.io/v1); an older API server refuses",
        "the apply, and then nothing limits what the team-less JobSets run as.",
        f"  kubectl apply -f deployments/work-pool/{ADMISSION_NAME}"))
    return head + yaml.safe_dump_all(teamless_policy(SHARED_ACCOUNT), sort_keys=False,
                                     width=100)


def template_text(team: str) -> str:
    base = json.loads(BASE_TEMPLATE.read_text())
    return json.dumps(team_template(base, team), indent=2) + "\n"


def team_files(teams: Mapping[str, Iterable[str]]) -> dict[Path, str]:
    """Every generated file and its text, for ``teams`` (name → its profiles), and the
    team-less flow account's admission policy."""
    return {admission_file(None): teamless_admission_text()} | {
        path: text for team in sorted(teams)
        for path, text in ((template_file(team), template_text(team)),
                           (rbac_file(team), rbac_text(team, sources_of(teams[team]))),
                           (admission_file(team),
                            admission_text(team, sources_of(teams[team]))))}


def drift(teams: Mapping[str, Iterable[str]]) -> list[str]:
    """What differs between the shipped files and the generator: a file missing or changed,
    or a team directory whose team the teams file no longer names."""
    wanted = team_files(teams)
    out = [f"{shown(p)} {'differs from' if p.is_file() else 'is missing,'} what the "
           "generator writes" for p, text in wanted.items()
           if not p.is_file() or p.read_text() != text]
    names = set(teams)
    if TEAM_DIR.is_dir():
        out += [f"{shown(d)} is of no team of the teams file" for d in sorted(TEAM_DIR.iterdir())
                if d.name not in names]
    return out


def write(teams: Mapping[str, Iterable[str]]) -> list[Path]:
    """Write every team's files that differ; a directory of a team the file no longer names
    is left where it is (the tool deletes nothing it did not just write): ``drift`` names it
    for the operator to remove with the team's pool."""
    written = []
    for path, text in team_files(teams).items():
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.is_file() or path.read_text() != text:
            path.write_text(text)
            written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    from flows.config.teams import load_teams

    parser = argparse.ArgumentParser(
        prog="python -m flows.backends.gke.flow_pools",
        description="write each team's work pool template and Role (deployments/work-pool/"
                    "teams/TEAM/) from the teams file and the shared files")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 naming each file that differs")
    args = parser.parse_args(argv)
    teams = {name: team.profiles for name, team in load_teams().teams.items()}
    if args.check:
        problems = drift(teams)
        for line in problems:
            print(line)
        return 1 if problems else 0
    for path in write(teams):
        print(f"wrote {shown(path)}")
    for line in drift(teams):  # what is left: a team the file no longer names
        print(f"{line}: remove it (and the team's pool) by hand")
    return 0


if __name__ == "__main__":
    sys.exit(main())
