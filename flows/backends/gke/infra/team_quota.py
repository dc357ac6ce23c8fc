"""Each team's TPU chips on the shared cluster: its guaranteed quota, how much it may borrow,
its fair-sharing weight. Pure: the teams file and the cluster's chip count in, numbers out.

Why an even split when a team sets no ``tpu_chips``: the file says nothing about which team
needs more, and Kueue lends a team's unused quota to the others of the cohort (kueue v0.17.1
apis/kueue/v1beta2/clusterqueue_types.go, ResourceQuota.nominalQuota: "the sum of the
quotas for each (flavor, resource) combination defines the maximum quantity that can be
allocated by a ClusterQueue in the cohort"), so an even guarantee costs an idle cluster
nothing: it only decides who gets the chips back first when two teams want them at once.
The chips the teams that set ``tpu_chips`` leave are shared evenly by the rest (the
remainder of the division goes to the first teams in file order, so no chip is lost).

Why the default borrowing limit is "every other team's chips": a single run needs the whole
slice (every chip of the profile), which an even part never holds, so a team must be able to
borrow the rest while the others are idle. A team that must never take another's idle chips
says ``borrowing_limit_chips: 0``.
"""

from __future__ import annotations

from dataclasses import dataclass

from flows.common.issues import Issue
from flows.config.errors import ProfileError
from flows.config.teams import CATEGORY, Teams, teams_path


@dataclass(frozen=True)
class TeamQuota:
    """One team's ClusterQueue numbers, in TPU chips."""

    team: str
    nominal: int
    borrowing_limit: int
    weight: float

    @property
    def most(self) -> int:
        """The most chips the team's workloads may hold at once (nominal + borrowing)."""
        return self.nominal + self.borrowing_limit


def quota_issues(teams: Teams, cluster_chips: int, run_chips: dict[str, int]) -> list[Issue]:
    """Pure: what makes the teams' quotas impossible on a cluster of ``cluster_chips``.
    ``run_chips`` is the chips one run of each team's profile needs (a run above its team's
    nominal + borrowing limit would wait forever: Kueue's "insufficient quota ... > maximum
    capacity", flavorassigner.go fitsResourceQuota)."""
    issues: list[Issue] = []
    fixed = sum(t.tpu_chips or 0 for t in teams.teams.values())
    if fixed > cluster_chips:
        issues.append(Issue("teams.*.tpu_chips", f"the teams are given {fixed} chips, the "
                            f"cluster has {cluster_chips}", "lower the teams' tpu_chips so "
                            f"they add up to at most {cluster_chips}", CATEGORY))
        return issues
    unset = [t for t in teams.teams.values() if t.tpu_chips is None]
    if unset and cluster_chips - fixed < len(unset):
        issues.append(Issue(f"teams.{unset[0].name}.tpu_chips", f"the teams that set tpu_chips "
                            f"leave {cluster_chips - fixed} chips for {len(unset)} teams "
                            "without it", "give every team tpu_chips, or lower the others'",
                            CATEGORY))
        return issues
    quotas = team_quotas(teams, cluster_chips)
    for team in teams.teams.values():
        q = quotas[team.name]
        for profile in team.profiles:
            need = run_chips.get(profile, 0)
            if need > q.most:
                issues.append(Issue(
                    f"teams.{team.name}.borrowing_limit_chips", f"a run of {profile} needs "
                    f"{need} chips; team {team.name} may hold at most {q.most} ({q.nominal} "
                    f"its own + {q.borrowing_limit} borrowed), so Kueue would never admit it",
                    f"raise borrowing_limit_chips to at least {need - q.nominal} (or "
                    f"tpu_chips), or move {profile} to a team with room", CATEGORY))
    return issues


def team_quotas(teams: Teams, cluster_chips: int) -> dict[str, TeamQuota]:
    """Pure: every team's quota, by name, in the file's order. Assumes ``quota_issues``
    found nothing about the split (see ``checked_quotas``)."""
    fixed = sum(t.tpu_chips or 0 for t in teams.teams.values())
    unset = [t.name for t in teams.teams.values() if t.tpu_chips is None]
    each, extra = divmod(max(0, cluster_chips - fixed), len(unset) or 1)
    out = {}
    for team in teams.teams.values():
        nominal = team.tpu_chips if team.tpu_chips is not None else \
            each + (1 if unset.index(team.name) < extra else 0)
        limit = team.borrowing_limit_chips
        out[team.name] = TeamQuota(team.name, nominal, cluster_chips - nominal
                                   if limit is None else limit, team.fair_weight)
    return out


def checked_quotas(teams: Teams, cluster_chips: int,
                   run_chips: dict[str, int]) -> dict[str, TeamQuota]:
    """The quotas, or a ProfileError naming the teams file's field and the fix."""
    if issues := quota_issues(teams, cluster_chips, run_chips):
        path = teams_path()
        raise ProfileError(str(path), issues, header=f"the teams file {path} does not fit "
                           f"a cluster of {cluster_chips} TPU chips")
    return team_quotas(teams, cluster_chips)
