"""Pre-flight's result type: a check's status and its Issue, shared by every check module
(checks.py, capacity.py, access.py), so a check module needs no import of the runner."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from flows.common.issues import Issue

Status = Literal["ok", "warn", "unknown", "fail"]


# The profile field each check is about: the field of its Issue.
CHECK_FIELDS = {"authorized_cidr": "gke.authorized_cidr", "apis": "gke.project",
                "reservation": "gke.reservation", "tpu-quota": "gke.region",
                "jobset": "gke.cluster", "kueue": "gke.cluster",
                "bucket-metadata-access": "gke.iam_mode",
                "operator-permissions": "gke.project", "artifact-registry": "image.repository",
                "pathways-images": "gke.pathways_tag", "kueue-admission": "gke.kueue_queue",
                "cpu-pool-capacity": "gke.conversion_memory",
                "cloud-build-account": "image.builder", "zone-capacity": "gke.zones",
                "tpu-generation": "gke.machine_type", "team-queues": "teams",
                "credentials": "gke.project"}


@dataclass(frozen=True)
class CheckResult:
    """A check's status and its Issue (category ``preflight/<check>``); for a passing check
    the issue's ``problem`` is what was found and its ``fix`` is empty or unused."""

    status: Status
    issue: Issue
    target: str = ""  # the live object read (or the planned one, before it exists)

    @property
    def name(self) -> str:
        return self.issue.category.removeprefix("preflight/")

    def render(self) -> str:
        line = f"[{self.status.upper():<7}] {self.name}: {self.issue.problem}"
        if self.target:
            line += f"\n          checked: {self.target}"
        fix = self.issue.fix
        return line + (f"\n          fix: {fix}" if fix and self.status != "ok" else "")


def result(name: str, status: Status, found: str, fix: str = "", target: str = ""
           ) -> CheckResult:
    return CheckResult(status, Issue(CHECK_FIELDS[name], found, fix, f"preflight/{name}"),
                       target)


@dataclass(frozen=True)
class FactError:
    """A fact that could not be read; the check it feeds reports 'unknown' with the reason."""

    message: str


def unknown(name: str, fact: FactError, fix: str) -> CheckResult:
    return result(name, "unknown", f"could not be read ({fact.message})", fix)
