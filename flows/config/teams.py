"""Teams: named groups of profiles with a budget in dollars per calendar month (UTC).

Where a team is declared: one file, ``deployments/teams.yaml`` (``TPURL_TEAMS_FILE`` names
another), not a ``team:`` field in each profile. Why the file: a budget is the platform's
decision, not the profile author's; one file shows every team's budget and members at once,
so "each profile in at most one team" is checked in one place, and a run's overrides (which
may change run-tunable profile fields) can never move a run into a team with money left.
A profile named by no team runs without a team budget (its per-run cap still applies).

Where a team's spend is kept: ``ledger_root`` (the file's, or a team's own), a ``gs://`` bucket
or ``file://`` directory that only the flow writes, never an output root a training pod can
write (docs/decisions/0023-ledger-only-the-flow-writes.md). A run of a team without one is
refused at its start, naming the field.

The file is validated whole before any run uses it: a team name that is no Kubernetes
name (``team_name_problem``), an unknown key, a budget that is not a positive number, a
profile named twice or a name that is no shipped profile is refused with the field
(``teams.NAME.usd_per_month``) and its fix. Pure: reads the file, nothing else.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from flows.common.failure_codes import Failure
from flows.common.issues import Issue
from flows.common.paths import REPO_ROOT
from flows.common.yaml_text import load_yaml
from flows.config.errors import ProfileError
from flows.config.loading import profile_name_problem
from flows.config.profile_file import profile_names

TEAMS_FILE = REPO_ROOT / "deployments" / "teams.yaml"
TEAMS_ENV = "TPURL_TEAMS_FILE"
CATEGORY = Failure.CONFIG_TEAMS_FILE
TEAM_NAME_MAX = 58
"""63 (a Kubernetes label value and an RFC 1123 label) less ``team-``, the prefix of the
team's LocalQueue and ClusterQueue names, which its JobSets carry as a label value."""
_RFC1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def team_name_problem(name: str) -> str | None:
    """Pure: why ``name`` cannot name a team (None: it can). A team's name becomes Kubernetes
    object names (``team-NAME``: a ClusterQueue, a LocalQueue) and the value of the
    ``kueue.x-k8s.io/queue-name`` label of its JobSets, so it must be an RFC 1123 label
    (apimachinery pkg/util/validation IsDNS1123Label: lowercase letters, digits and '-',
    starting and ending with a letter or digit) short enough to keep ``team-NAME`` within 63
    characters. Checked when the file loads, so a bad name is refused before any deploy
    rather than by the API server halfway through one."""
    if len(name) > TEAM_NAME_MAX:
        return f"{name!r} has {len(name)} characters; a team name has at most {TEAM_NAME_MAX}"
    if not _RFC1123_LABEL.match(name):
        return (f"{name!r} is no Kubernetes name (RFC 1123 label: lowercase letters, digits "
                "and '-', starting and ending with a letter or digit)")
    return None


def _suggested_name(name: str) -> str:
    text = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")[:TEAM_NAME_MAX].strip("-")
    return text or "team-a"


_GCS_LEDGER = re.compile(r"gs://[a-z0-9][a-z0-9._-]{1,220}[a-z0-9](/[A-Za-z0-9._-]+)*")


def _ledger_uri(value: str) -> str:
    """A ledger root is a gs:// bucket (and prefix) or a file:// directory, without ``..``."""
    text = value.strip().rstrip("/")
    if not ((text.startswith("gs://") and len(text) > 5) or text.startswith("file:///")):
        raise ValueError(f"{value!r} is no gs://BUCKET or file:///PATH")
    if ".." in text.split("/"):
        raise ValueError(f"{value!r} holds a '..' segment")
    if text.startswith("gs://") and not _GCS_LEDGER.fullmatch(text):
        # its bucket and prefix go into the IAM condition `tpurl flow-identity` prints
        raise ValueError(f"{value!r} is no gs://BUCKET[/PREFIX] of a bucket name (lowercase "
                         "letters, digits, '.', '_', '-') and a prefix of letters, digits, "
                         "'.', '_', '-' and '/'")
    return text


LedgerRoot = Annotated[str, AfterValidator(_ledger_uri)]


class Team(BaseModel):
    """One team: its monthly budget and the profiles whose runs spend it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = ""  # filled from the file's key
    usd_per_month: float = Field(gt=0)
    """Dollars of TPU time the team's runs may spend per calendar month (UTC)."""
    profiles: tuple[str, ...] = Field(min_length=1)
    """The profiles (names under deployments/profiles) whose runs are the team's."""
    tpu_chips: int | None = Field(default=None, gt=0)
    """TPU chips the team's Kueue ClusterQueue is guaranteed (its nominal quota in every TPU
    flavor). Unset: an even part of what the cluster's chips leave after the teams that set
    it (flows.backends.gke.infra.team_quota says why even)."""
    borrowing_limit_chips: int | None = Field(default=None, ge=0)
    """Chips above ``tpu_chips`` the team may borrow from the other teams' unused quota.
    Unset: all the others' chips (idle quota is never wasted); 0: never borrows."""
    fair_weight: float = Field(default=1.0, gt=0)
    """Kueue's fairSharing.weight: a team of weight 2 may hold twice the borrowed share of a
    team of weight 1 before the other's workloads go first."""
    ledger_root: LedgerRoot | None = None
    """Where the team's spend ledger is kept (gs://BUCKET[/PREFIX] or file:///PATH): a place
    only the flow's identity writes. Unset: the file's ``ledger_root``."""


class Teams(BaseModel):
    """Every team of the platform, by name."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    teams: dict[str, Team] = Field(default_factory=dict)
    ledger_root: LedgerRoot | None = None
    """Every team's spend ledger, unless a team names its own (``teams.NAME.ledger_root``)."""

    def team_of(self, profile: str) -> Team | None:
        """The team whose budget a run of ``profile`` spends (None: no team budget)."""
        return next((t for t in self.teams.values() if profile in t.profiles), None)

    def named(self, name: str) -> Team | None:
        return self.teams.get(name)


def teams_path() -> Path:
    return Path(os.environ.get(TEAMS_ENV) or TEAMS_FILE)


def load_teams(path: Path | None = None) -> Teams:
    """The teams file, validated; no file: no teams. A bad file: ProfileError naming each
    field and its fix."""
    path = path or teams_path()
    if not path.is_file():
        return Teams()
    try:
        raw = load_yaml(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise _invalid(path, [Issue("teams", f"is not valid YAML: {exc}",
                                    f"correct the YAML of {path}", CATEGORY)]) from None
    if not isinstance(raw, dict) or not isinstance(raw.get("teams", {}), dict):
        raise _invalid(path, [Issue("teams", "must be a mapping of team name to "
                                    "{usd_per_month, profiles}", "write `teams: {NAME: "
                                    "{usd_per_month: 500, profiles: [PROFILE]}}`", CATEGORY)])
    named = {str(k): {**v, "name": str(k)} if isinstance(v, dict) else v
             for k, v in (raw.get("teams") or {}).items()}
    shared = raw.get("ledger_root")  # a team without its own keeps the file's
    named = {k: {**v, "ledger_root": v.get("ledger_root") or shared} if isinstance(v, dict)
             else v for k, v in named.items()}
    try:
        teams = Teams.model_validate({**raw, "teams": named})
    except ValidationError as exc:
        raise _invalid(path, [Issue(".".join(["teams", *(str(p) for p in e["loc"][1:])])
                                    if e["loc"][:1] == ("teams",) else ".".join(
                                        str(p) for p in e["loc"]) or "teams", e["msg"],
                                    _fix(e["loc"]), CATEGORY) for e in exc.errors()]) from None
    if issues := name_issues(teams) + membership_issues(teams, profile_names()):
        raise _invalid(path, issues)
    return teams


def name_issues(teams: Teams) -> list[Issue]:
    """Pure: every team whose name is no Kubernetes name, with a name that would do."""
    return [Issue(f"teams.{name}", problem, f"rename the team to a Kubernetes name, e.g. "
                  f"{_suggested_name(name)!r} (the key under teams:)", CATEGORY)
            for name in teams.teams if (problem := team_name_problem(name))]


def membership_issues(teams: Teams, shipped: list[str]) -> list[Issue]:
    """Pure: a profile in two teams, or a member that is no shipped profile's name."""
    issues: list[Issue] = []
    owner: dict[str, str] = {}
    for team in teams.teams.values():
        for index, profile in enumerate(team.profiles):
            field = f"teams.{team.name}.profiles.{index}"
            if (problem := profile_name_problem(profile)) or profile not in shipped:
                issues.append(Issue(field, problem or f"{profile!r} is no profile under "
                                    "deployments/profiles", "name a profile of "
                                    f"deployments/profiles ({', '.join(shipped)})", CATEGORY))
            elif profile in owner:
                issues.append(Issue(field, f"{profile} is already in team {owner[profile]}: a "
                                    "profile spends one team's budget", f"remove it from "
                                    f"team {team.name} or from team {owner[profile]}", CATEGORY))
            else:
                owner[profile] = team.name
    return issues


def _fix(loc: tuple[int | str, ...]) -> str:
    last = str(loc[-1]) if loc else ""
    if last == "usd_per_month":
        return "give the team's monthly budget in dollars, a number above 0 (e.g. 500)"
    if last == "tpu_chips":
        return "give the chips the team is guaranteed, a whole number above 0, or remove it " \
            "for an even part of the cluster's chips"
    if last == "borrowing_limit_chips":
        return "give the chips the team may borrow above its own, a whole number (0: none), " \
            "or remove it to let it borrow every idle chip"
    if last == "ledger_root":
        return ("give a gs://BUCKET (a bucket only the flow's identity writes, no profile's "
                "bucket) or file:///PATH (local runs), without '..'")
    if last == "fair_weight":
        return "give a number above 0 (1 is every team's default; 2 is a double share)"
    if last == "profiles" or (len(loc) > 1 and str(loc[-2]) == "profiles"):
        return "list the team's profile names, e.g. profiles: [smoke-qwen3-0.6b-v6e-8]"
    return ("a team has only usd_per_month, profiles, tpu_chips, borrowing_limit_chips, "
            "fair_weight and ledger_root; remove the key or correct its spelling")


def _invalid(path: Path, issues: list[Issue]) -> ProfileError:
    return ProfileError(str(path), issues, header=f"the teams file {path} is invalid")
