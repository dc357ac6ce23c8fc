"""The Kubernetes Secrets a run writes, and whether the shipped Role lets the flow replace them.

Each secret reference of a workload (``secret_env``: the HF token, the W&B key) becomes one
Secret named by its owner (the profile's team, else the profile) and its source, not by the
run (jobs/naming.py ``secret_name``), created at submit time or, when a stage or run of the
same owner before created it, replaced with the current value (jobset_client.py). Named
Secrets that are replaced, rather than per-run Secrets created and deleted, because of what
each asks of the flow's Role (deployments/work-pool/rbac.yaml):

- a replace can be limited to the names it needs (``update`` with ``resourceNames``), so the
  flow may overwrite its own Secrets and no other; ``create`` cannot be limited by name but
  cannot overwrite either (409 AlreadyExists);
- per-run names are unknown when the Role is written, so their ``delete`` could not be
  limited by name: the flow could delete every Secret of the namespace, a wider grant than
  replacing a few named ones. And a per-run Secret must outlive the flow process (a
  reattached run's pods, a JobSet restarting its pods, read it at start), so a flow killed
  outright leaves it behind holding the token, where a named one is simply reused.

The price of names: a source the Role does not name gets 409 then 403 on its second write
(watch/forbidden.py diagnoses it). So the plan lists every Secret the run writes and says
which ones the shipped Role may replace (``plan_lines``). Pure, but for reading the manifest.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

import yaml

from flows.backends.gke import flow_pools
from flows.backends.gke.jobs.naming import secret_name
from flows.core.workload import Workload

ROLE = "tpurl-flow"


def role_of(owner: str) -> tuple[Path, str]:
    """The file and the name of the Role the flow pods of ``owner`` (``team:NAME``, else
    ``profile:NAME``) run under: the team's own (its pool's, flow_pools.py), else the
    team-less flow pods' of rbac.yaml."""
    kind, _, name = owner.partition(":")
    team = name if kind == "team" else None
    return flow_pools.rbac_file(team), flow_pools.flow_account_id(team)


def written_secrets(workloads: Mapping[str, Workload],
                    owner: str) -> dict[str, tuple[str, list[str]]]:
    """Secret name → (the source it holds, the jobs that write it), in the jobs' order, for
    the run's owner (jobs/secret_objects.py ``owner_of``: its team, else the profile)."""
    found: dict[str, tuple[str, list[str]]] = {}
    for job, workload in workloads.items():
        for _, ref in workload.secret_env:
            source = ref.describe()
            jobs = found.setdefault(secret_name(owner, source), (source, []))[1]
            if job not in jobs:
                jobs.append(job)
    return found


def replaceable(documents: Iterable[object], role: str = ROLE) -> frozenset[str] | None:
    """The Secret names the Role ``role`` may update (its rules on secrets with the verb
    ``update``); None when one of them names no resourceNames (any Secret)."""
    names: set[str] = set()
    for doc in documents:
        if not (isinstance(doc, dict) and doc.get("kind") == "Role"
                and (doc.get("metadata") or {}).get("name") == role):
            continue
        for rule in doc.get("rules") or []:
            if not ({"", "*"} & set(rule.get("apiGroups") or [])
                    and {"secrets", "*"} & set(rule.get("resources") or [])
                    and {"update", "*"} & set(rule.get("verbs") or [])):
                continue
            if not rule.get("resourceNames"):
                return None
            names |= set(rule["resourceNames"])
    return frozenset(names)


def shipped_replaceable(owner: str = "") -> frozenset[str] | None:
    """What the shipped Role of ``owner``'s flow pods may replace (none: its file is not
    generated yet; no owner: the team-less Role)."""
    path, role = role_of(owner)
    if not path.is_file():
        return frozenset()
    return replaceable(yaml.safe_load_all(path.read_text()), role)


def plan_lines(workloads: Mapping[str, Workload], namespace: str, owner: str,
               allowed: frozenset[str] | None) -> list[str]:
    """What ``tpurl plan`` prints: every Secret the run writes, what it holds, who writes
    it, and whether the shipped Role may replace it."""
    written = written_secrets(workloads, owner)
    if not written:
        return []
    path, role = role_of(owner)
    where = flow_pools.shown(path)
    regenerate = ("" if not owner.startswith("team:") else
                  "; a team's Role is generated: run `python -m flows.backends.gke.flow_pools`"
                  " after naming the source in a profile of the team")
    lines = [f"Secrets the run writes in namespace {namespace}, {owner}'s own (created, or "
             f"replaced when an earlier stage or run of {owner} wrote them; the Role {role} "
             f"of {where} must let the flow update each):"]
    for name, (source, jobs) in written.items():
        granted = allowed is None or name in allowed
        verdict = ("the shipped Role may replace it" if granted else
                   f"NOT in the Role's secrets update rule: add {name} to its resourceNames "
                   f"({where}{regenerate}) and apply the file, or the second stage that "
                   "writes it fails (403)")
        lines.append(f"  {name}: {source}, written by {', '.join(jobs)}; {verdict}")
    return lines
