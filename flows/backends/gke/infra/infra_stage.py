"""Entry points the rest of the project calls: the infra stage's GKE plan/run, `tpurl plan
--check`, and the stage's chip-hours. Thin on purpose: the logic lives in the modules above.
"""

from __future__ import annotations

from typing import Any

from flows.backends.gke.infra import clients, iam
from flows.backends.gke.infra.cloud import GoogleApis
from flows.backends.gke.infra.commands import deploy_argv, get_credentials_argv, render
from flows.backends.gke.infra.cost import cost_plan, render_cost
from flows.backends.gke.infra.preflight.access import Planned
from flows.backends.gke.infra.provision import InfraReport, preflight, provision
from flows.backends.gke.infra.settings import (
    BLUEPRINT_EXAMPLE,
    InfraSettings,
    settings_from_profile,
    world_open_warning,
)
from flows.config.profile import Profile
from flows.core.backend import StageLogger


def gke_plan_actions(profile: Profile) -> list[str]:
    """The infra stage's steps with their exact commands (pure)."""
    s = settings_from_profile(profile)
    actions = [
        "pre-flight: APIs, reservation, TPU quota, JobSet/Kueue on an existing cluster, "
        "bucket metadata access, your IAM permissions, the image repository, the Pathways "
        "images, Kueue admission and CPU-pool fit of every pod (tpurl plan --check)",
        f"create gs://{s.gke.bucket} in {s.gke.region} with uniform bucket-level access (if missing)",
        f"skip the deploy if cluster {s.gke.cluster} exists and its TPU pools match "
        f"({s.gke.machine_type} {s.gke.topology} x{s.gke.num_slices}, capacity "
        f"{', '.join(s.gke.capacity_chain)} in {', '.join(s.gke.zone_order)}"
        + (f", reservation {s.gke.reservation})" if s.gke.reservation else ")"),
        f"fetch Cluster Toolkit {s.gke.cluster_toolkit_version} ({s.bundle_url}; cached, sha256 "
        "recorded)",
        f"edit {BLUEPRINT_EXAMPLE}: storage.admin for node_pool_service_account"
        if s.gke.iam_mode == "project-storage-admin" else
        f"use {BLUEPRINT_EXAMPLE} without the storage.admin edit (iam_mode bucket-scoped)",
        "stage deployments/blueprints/kueue-configuration.yaml.tftpl beside it as the "
        "blueprint's kueue_configuration_path (a ClusterQueue covering google.com/tpu and "
        f"cpu, memory, ephemeral-storage on {s.gke.cpu_pool})",
        *_capacity_actions(s),
        f"restore gs://{s.gke.bucket}/{s.state_prefix}deployment/ (if any), then "
        f"{render(deploy_argv(s))}, then save the folder there again",
        render(get_credentials_argv(s)),
    ]
    actions += [render(b.argv()) + " (if missing)" for b in iam.desired_bindings(s)]
    actions += [f"gcloud auth configure-docker {r} --quiet (if missing)"
                for r in iam.registries(s)]
    return actions


def gke_plan_notes(profile: Profile) -> list[str]:
    s = settings_from_profile(profile)
    notes = []
    if warning := world_open_warning(s.gke):
        notes.append(warning)
    if s.gke.iam_mode == "project-storage-admin":
        notes.append("iam_mode project-storage-admin (the tutorial's) lets every pod, the "
                     "privileged host-network Pathways ones included, read, overwrite and "
                     "delete every bucket of the project; gke.iam_mode: bucket-scoped (the "
                     "default) grants the pipeline's bucket only")
    notes += identity_notes(profile, s)
    notes += render_cost(cost_plan(profile))
    return notes


def identity_notes(profile: Profile, s: InfraSettings) -> list[str]:
    """The grants per team on the profile's cluster: each team with its account, principal
    and buckets (those of its profiles that load here and are on this cluster; a team none of
    whose profiles does is named with its account), the team-less, then the node pool's
    account; a bucket two teams would share is a warning (team_identity.py)."""
    from flows.backends.gke.team_identity import (
        TEAM_ROLES,
        Member,
        cluster_grants,
        node_account,
        principal,
        shared_bucket_issues,
        team_account,
    )
    from flows.config.errors import ProfileError
    from flows.config.loading import load_profile
    from flows.config.teams import load_teams

    if s.gke.iam_mode != "bucket-scoped":
        return []
    teams = load_teams()
    members = [Member(profile.name, s.team, s.gke.project, s.gke.namespace, s.gke.bucket)]
    for name in sorted({n for t in teams.teams.values() for n in t.profiles} - {profile.name}):
        try:
            other = load_profile(name).gke
        except ProfileError:  # its project or bucket is given elsewhere: cannot be told
            continue
        team = teams.team_of(name)
        if other is not None and (other.project, other.cluster) == (s.gke.project,
                                                                    s.gke.cluster):
            members.append(Member(name, team.name if team else None, other.project,
                                  other.namespace, other.bucket))
    grants = cluster_grants(members, s.project_number)
    roles = " and ".join(TEAM_ROLES)
    lines = [f"identity: {'team ' + g.team if g.team else 'profiles in no team'}: pods run "
             f"as Kubernetes service account {g.account} ({g.member}); {roles} on "
             f"{', '.join('gs://' + b for b in g.buckets)} only" for g in grants]
    shown = {g.team for g in grants}
    lines += [f"identity: team {name}: pods run as Kubernetes service account {account} "
              f"({principal(s.gke.project, s.gke.namespace, account, s.project_number)}); "
              "its own profiles' buckets only"
              for name in sorted(teams.teams) if name not in shown
              for account in (team_account(name),)]
    lines += [f"identity: WARNING {i.problem}; {i.fix}" for i in shared_bucket_issues(grants)]
    for g in grants:
        account = node_account(s.gke.project, s.gke.cluster, g.team)
        lines.append(
            f"identity: {'team ' + g.team if g.team else 'profiles in no team'}: TPU nodes "
            f"run as {account}, and so do the Pathways workers on them (host network, no "
            f"team code); {roles} on {', '.join('gs://' + b for b in g.buckets)} only"
            + ("" if g.team else " (every profile in no team shares it)"))
    lines += [f"identity: team {name}: TPU nodes run as "
              f"{node_account(s.gke.project, s.gke.cluster, name)}, and so do the Pathways "
              "workers on them; its own profiles' buckets only"
              for name in sorted(teams.teams) if name not in shown]
    return lines


def planned_for(profile: Profile) -> Planned:
    """What the pipeline will submit for this profile (pure): the pod sets of the very
    JobSets the backend renders, where the image goes, which Pathways images run."""
    from flows.backends.gke.infra.admission import pod_sets
    from flows.backends.gke.jobs.manifests import render_all
    from flows.backends.gke.jobs.options import options_for
    from flows.backends.gke.runtime import GkeRuntime
    from flows.core.layout import patched_image_ref
    from flows.core.planned_programs import planned_workloads

    workloads = planned_workloads(profile, GkeRuntime(profile))
    jobsets = [o for o in render_all(profile, workloads) if o.get("kind") == "JobSet"]
    sets = [ps for stage, jobset in zip(workloads, jobsets, strict=True)
            for ps in pod_sets(stage, jobset)]
    options = options_for(profile)
    return Planned(pod_sets=sets, image_repository=patched_image_ref(profile).rsplit(":", 1)[0],
                   pathways_images=(options.server_image, options.proxy_image),
                   base_image=profile.image.base, image_builder=profile.image.builder)


def check_text(profile: Profile, apis: GoogleApis | None = None,
               storage_client: Any = None) -> tuple[str, bool]:
    """For `tpurl plan PROFILE --check`: (printable report, True when nothing failed).
    Reads only (GETs and testIamPermissions); it creates, grants and deploys nothing."""
    from flows.backends.gke.infra.preflight.checks import failures, render_checks
    from flows.backends.gke.infra.preflight.results import result
    from flows.core.failures import StageFailed

    s = settings_from_profile(profile)
    if apis is None:
        try:
            apis, storage_client = clients.default_clients(s)
        except StageFailed as failed:  # no credentials or no client: nothing can be read
            d = failed.diagnosis
            results = [result("credentials", "fail", f"{d.summary} ({d.detail[:160]})",
                              d.fix)]
            return render_checks(results), False
    results = preflight(s, apis, storage_client, planned_for(profile))
    return render_checks(results), not failures(results)


def run_gke(profile: Profile, logger: StageLogger) -> InfraReport:
    """The GKE infra step's run: provision everything, idempotently."""
    s = settings_from_profile(profile)
    apis, storage_client = clients.default_clients(s)
    return provision(s, apis, storage_client, logger, planned=planned_for(profile))


def gke_outputs_present(profile: Profile) -> bool:
    """For the GKE infra step's outputs_present: a lineage record alone must not skip the stage
    after a teardown; the cluster must still exist with the profile's TPU pool."""
    from flows.backends.gke.infra.cluster import pool_mismatches

    s = settings_from_profile(profile)
    apis, _ = clients.default_clients(s)
    cluster = apis.get_cluster(s.gke.project, s.gke.region, s.gke.cluster)
    return cluster is not None and not pool_mismatches(cluster, s)


def verify_gke(profile: Profile) -> tuple[dict[str, str], dict[str, Any]]:
    """For the GKE infra step's verify: the pool matches and both accounts can read the bucket."""
    from flows.backends.gke.infra.cluster import pool_mismatches
    from flows.backends.gke.infra.preflight.checks import check_bucket_access
    from flows.core.failures import user_error

    s = settings_from_profile(profile)
    apis, _ = clients.default_clients(s)
    cluster = apis.get_cluster(s.gke.project, s.gke.region, s.gke.cluster)
    problems = pool_mismatches(cluster, s) if cluster is not None else ["no cluster"]
    access = check_bucket_access(s, apis.project_iam_policy(s.gke.project),
                                 apis.bucket_iam_policy(s.gke.bucket), planned=False)
    if problems or access.status == "fail":
        raise user_error("infra", "the infrastructure is not what the profile asks for",
                         "; ".join([*problems, access.issue.problem]), access.issue.fix or "rerun the stage")
    return ({"root": f"gs://{s.gke.bucket}", "cluster": f"{s.gke.project}/{s.gke.zone}/{s.gke.cluster}"},
            {"pool_chips": s.gke.total_chips, "iam_mode": s.gke.iam_mode,
             "idle_usd_per_hour": s.gke.idle_usd_per_hour})


def _capacity_actions(s: InfraSettings) -> list[str]:
    """What each capacity mode's blueprint edits do (deployments/blueprints/*.edits.yaml):
    one line per mode of the chain, in the order tried, with the pools it gets."""
    from flows.backends.gke.capacity_pools import pools_of_mode

    g, out = s.gke, []
    for mode in g.capacity_chain:
        names = ", ".join(f"{p.name} ({p.zone})" for p in pools_of_mode(g, mode, s.team))
        if mode == "reservation":
            out.append(f"TPU pool {names}: static, {g.hosts_per_slice} nodes per slice on "
                       f"reservation {g.reservation} (billed while the reservation exists)")
            continue
        extra = {"spot": ", spot VMs (preemptible)",
                 "flex-start": f", flex-start (auto-repair off, nodes live at most "
                               f"{g.max_run_hours or 0:g} h)",
                 "queued": f", queued provisioning (Kueue ProvisioningRequest, the slice "
                           f"whole or not at all; nodes live at most {g.max_run_hours or 0:g} "
                           "h)"}.get(mode, "")
        out.append(f"TPU pool(s) {names}: no reservation, autoscaling 0..{g.hosts_per_slice} "
                   f"nodes per slice{extra}; Kueue flavor {mode} with every slice's chips")
    return out
