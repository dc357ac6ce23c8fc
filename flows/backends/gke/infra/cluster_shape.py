"""The shape of a cluster several teams share: its members (the GKE profiles of the teams
file on it), the TPU chips their slices hold, the capacity modes Kueue has a flavor for,
and each team's quota. One function of the teams file, so every member's deploy stages
the same Kueue objects for the cluster (docs/decisions/0026-one-cluster-shape-from-the-teams-file.md
says why the teams file and not a cluster file).

Who is a member: every profile a team of the teams file names that loads here with the
deploying profile's cluster fields (project, region, zone, cluster, bucket, authorized_cidr:
on a shared platform they come from the one work pool's environment, prefect.yaml) and
whose backend is gke. A member that does not load here (a field it needs the environment
does not give) is listed in ``unread`` and counted in nothing: it could not deploy from
here either. The deploying profile is always a member, at its place in the file (first
when it is in no team).

Why the chips are summed over distinct slices, not over members: two profiles of one slice
(generation, machine, topology, num_slices) share its TPU pools and each run holds it all;
two slices are two sets of pools that can each hold a run at once.

Pure but for ``members_here``, which reads the teams file and the member profiles.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from flows.backends.gke.capacity_pools import flavor_name, tpu_pools
from flows.backends.gke.infra.kueue_chart import deploy_sets_fair_sharing
from flows.backends.gke.infra.team_quota import TeamQuota, checked_quotas
from flows.config.errors import ProfileError
from flows.config.gke import GkeSection
from flows.config.teams import Teams, load_teams

SHARED_FIELDS = ("project", "region", "zone", "cluster", "bucket", "authorized_cidr")
"""What a member takes from the deploying profile: where the cluster is."""
UNKNOWN_RESERVATION = "a-reservation-of-its-own"
"""A member whose capacity needs a reservation the deploying profile's environment does not
name (each deployment gives its own): its shape (chips, modes) does not depend on which."""


@dataclass(frozen=True)
class Member:
    """One profile on the cluster, with its team (None: in no team)."""

    profile: str
    team: str | None
    gke: GkeSection

    @property
    def slice_key(self) -> tuple[str, str, str, int]:
        """What two members with one slice share: its TPU pools."""
        return (self.gke.machine.generation, self.gke.machine_type, self.gke.topology,
                self.gke.num_slices)


@dataclass(frozen=True)
class ClusterShape:
    """The cluster as the union of its members, in the teams file's order."""

    cluster: str
    members: tuple[Member, ...]
    unread: tuple[tuple[str, str], ...] = ()
    """(profile, why) of the teams' profiles that did not load here."""

    @property
    def chips(self) -> int:
        """TPU chips the cluster's pools hold: one run of each distinct slice of each team
        (a team's pools are its own: capacity_pools.py)."""
        seen: dict[tuple[str | None, str, str, str, int], int] = {}
        for m in self.members:
            seen.setdefault((m.team, *m.slice_key), m.gke.total_chips)
        return sum(seen.values())

    @property
    def capacity_chain(self) -> tuple[str, ...]:
        """Every member's capacity modes, each once, in the order the members list them:
        the TPU flavors of every team's ClusterQueue."""
        out: list[str] = []
        for m in self.members:
            out += [mode for mode in m.gke.capacity_chain if mode not in out]
        return tuple(out)

    @property
    def anchor(self) -> GkeSection:
        """The member whose cluster-wide settings (namespace, the queued-provisioning
        parameters, the generation) the Kueue objects take: the first, so which member
        deploys does not change them."""
        return self.members[0].gke

    def run_chips(self) -> dict[str, int]:
        return {m.profile: m.gke.total_chips for m in self.members}

    def pool_conflicts(self) -> list[tuple[str, str, str]]:
        """(pool, first member, later member) where two members plan one GKE node pool
        name for two different pools (another slice or capacity mode): one blueprint
        cannot build both, so a deploy of either is refused while the other's pool
        exists (infra/pool_owners.py)."""
        planned: dict[str, tuple[str, tuple[object, ...]]] = {}
        out = []
        for m in self.members:
            for pool in tpu_pools(m.gke, m.team):
                what = (m.team, *m.slice_key, pool.mode, pool.zone)
                for name in pool.slice_pools(m.gke.num_slices):
                    first = planned.setdefault(name, (m.profile, what))
                    if first[1] != what:
                        out.append((name, first[0], m.profile))
        return out

    def quotas(self, teams: Teams) -> dict[str, TeamQuota]:
        """Every team's quota on the union's chips; a split that does not fit, or a member
        its team could never hold: ProfileError naming the teams file's field."""
        return checked_quotas(teams, self.chips, self.run_chips())


def shape_of(cluster: str, members: Iterable[Member],
             unread: Iterable[tuple[str, str]] = ()) -> ClusterShape:
    return ClusterShape(cluster, tuple(members), tuple(unread))


def members_here(profile: str, gke: GkeSection, teams: Teams | None = None,
                 environ: dict[str, str] | None = None) -> ClusterShape:
    """The cluster shape as the deploying ``profile`` (with its ``gke`` section) sees it."""
    from flows.config.loading import load_profile

    teams = load_teams() if teams is None else teams
    env = dict(os.environ) if environ is None else environ
    shared = {f"gke.{field}": str(getattr(gke, field)) for field in SHARED_FIELDS
              if getattr(gke, field, None) is not None}
    members: list[Member] = []
    unread: list[tuple[str, str]] = []
    own_team = teams.team_of(profile)
    if own_team is None:
        members.append(Member(profile, None, gke))
    for team in teams.teams.values():
        for name in team.profiles:
            if name == profile:
                members.append(Member(profile, team.name, gke))
                continue
            try:
                other = _load_member(load_profile, name, shared, env, gke.reservation)
            except ProfileError as exc:
                if _is_gke(name):
                    unread.append((name, "; ".join(f"{i.field}: {i.problem}"
                                                   for i in exc.issues) or str(exc)))
                continue
            if other.gke is not None and other.gke.cluster == gke.cluster \
                    and other.gke.project == gke.project:
                members.append(Member(name, team.name, other.gke))
    return shape_of(gke.cluster, members, unread)


def _is_gke(name: str) -> bool:
    """Whether the profile file says ``backend: gke`` (a local profile is on no cluster)."""
    from flows.config.loading import shipped_profile_path
    from flows.config.profile_file import read_profile_file

    try:
        return read_profile_file(shipped_profile_path(name)).get("backend") == "gke"
    except (OSError, ValueError, ProfileError):
        return False


def _load_member(load: Any, name: str, shared: dict[str, str], env: dict[str, str],
                 reservation: str | None) -> Any:
    """The member profile with the cluster's fields; its reservation its own, else the
    deploying profile's, else a stand-in (only its name is unknown here, not its shape)."""
    given = {**shared, **({"gke.reservation": reservation} if reservation else {})}
    try:
        return load(name, given, environ=env)
    except ProfileError as exc:
        if not exc.issues or any(i.field != "gke.reservation" for i in exc.issues):
            raise
    return load(name, {**shared, "gke.reservation": "" if reservation else
                       UNKNOWN_RESERVATION}, environ=env)


def shape_lines(shape: ClusterShape, teams: Teams) -> list[str]:
    """What ``tpurl plan`` prints of the cluster: its members and their slices, its chips
    and Kueue flavors, each team's quota, and what stands in the way of one blueprint."""
    out = [f"Cluster {shape.cluster}, as the teams file's profiles on it make it "
           "(docs/how-to/team-budgets.md, \"One cluster, several teams\"):"]
    for m in shape.members:
        pools = ", ".join(name for p in tpu_pools(m.gke, m.team)
                          for name in p.slice_pools(m.gke.num_slices))
        out.append(f"  {m.profile} ({'team ' + m.team if m.team else 'no team'}): "
                   f"{m.gke.total_chips} chips, {m.gke.num_slices} x {m.gke.topology} "
                   f"{m.gke.machine_type}, {', '.join(m.gke.capacity_chain)}; pools {pools}")
    generation = shape.anchor.machine.generation
    out.append(f"  TPU chips: {shape.chips}; Kueue TPU flavors: " + ", ".join(
        flavor_name(mode, generation) for mode in shape.capacity_chain))
    try:
        quotas = shape.quotas(teams)
    except ProfileError as exc:
        out += [f"  does not fit: {i.field}: {i.problem} (fix: {i.fix})" for i in exc.issues]
        quotas = {}
    for q in quotas.values():
        out.append(f"  team {q.team}: {q.nominal} chips guaranteed, may borrow "
                   f"{q.borrowing_limit}, fair-sharing weight {q.weight:g}")
    if quotas:
        out.append(("  fair sharing: set by the deploy, which installs Kueue's chart with a "
                    "fairSharing section in its values (deployments/blueprints/"
                    "kueue-helm-values.yaml, decision 0041), so the weights order whose run "
                    "goes first among borrowing teams; a cluster deployed before keeps "
                    "Kueue's default configuration until its next deploy, which `tpurl plan "
                    "--check` (team-queues) reads live") if deploy_sets_fair_sharing() else
                   ("  fair-sharing weights do NOT act: Kueue's chart values "
                    "(deployments/blueprints/kueue-helm-values.yaml) have no fairSharing "
                    "section. Guarantees, borrowing limits and taking chips back act either "
                    "way"))
    out += [f"  team {team}'s TPU node pools are its own: labelled and tainted "
            f"tpurl/team={team}, run as its node account; only its pods land there. A "
            "cluster deployed before pools were per team has them under the old names "
            "(gke-tpu-v6e-pool, ...): the next deploy DELETES those and creates these, "
            "a JobSet running there is lost"
            for team in dict.fromkeys(m.team for m in shape.members if m.team)]
    for name, first, later in shape.pool_conflicts():
        out.append(f"  conflict: {first} and {later} each plan node pool {name} for another "
                   "slice or capacity; while one's pool exists, a deploy of the other is "
                   f"refused (give {later} the gke.machine_type, gke.topology, "
                   f"gke.num_slices and gke.capacity of {first}, or its own gke.cluster)")
    out += [f"  not counted (does not load here): {name}: {why}" for name, why in shape.unread]
    return out
