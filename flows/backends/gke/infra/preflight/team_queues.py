"""Pre-flight of a team's fair queue: are the team's LocalQueue and ClusterQueue on the
cluster the ones the teams file renders? Pure: the live objects and the rendered ones in.

Why a check beside kueue-admission: that one asks whether Kueue would ever admit the pods
through the queue that exists; this one whether the queue is still what
deployments/teams.yaml says. A teams file changed since the last deploy (a team's chips,
borrowing limit or weight) is only applied when the blueprint is re-applied; until then
Kueue admits by the old numbers, and a team may wait behind a borrower it should reclaim
from. It warns rather than fails: the run can still be admitted, only not as the file says.
Compared: the LocalQueue's ClusterQueue, and of the ClusterQueue the fields fair queues set
(infra/team_kueue.py): cohortName, fairSharing.weight, preemption, and per flavor the TPU
nominalQuota and borrowingLimit (kueue v0.17.1 apis/kueue/v1beta2/clusterqueue_types.go).

And Kueue's own configuration: the teams' weights order admission and preemption only when
it has a ``fairSharing`` section (infra/kueue_chart.py). The deploy sets it through Kueue's
chart values (deployments/blueprints/kueue-helm-values.yaml, decision 0041), so a cluster
whose live configuration lacks it was deployed before that, or had its Kueue installed
another way: the cohort still lends and reclaims, by classical preemption, and the weights
do nothing until the next deploy installs the chart with tpurl's values: a warning, with
that command. A configuration that cannot be read is said, not judged.
"""

from __future__ import annotations

from typing import Any

from flows.backends.gke.infra.kueue_chart import fair_sharing_on
from flows.backends.gke.infra.preflight.results import Status
from flows.config.gke_jobs import parse_quantity

TPU = "google.com/tpu"
# where Kueue's manifests keep its configuration (config/components/manager)
KUEUE_SYSTEM = "kueue-system"
KUEUE_MANAGER_CONFIG = "kueue-manager-config"
KUEUE_MANAGER_CONFIG_KEY = "controller_manager_config.yaml"
FAIR_SHARING_FIX = (
    "re-apply the blueprint: `tpurl run PROFILE` deploys it and installs Kueue's chart with "
    "fairSharing in its values (deployments/blueprints/kueue-helm-values.yaml); on a cluster "
    "whose Kueue kubectl-apply installed, that deploy reinstalls Kueue, so a run makes it "
    "only once no Kueue workload is admitted (`kubectl get workloads -A`; decision 0041)")


def _tpu_quotas(cq: dict[str, Any]) -> dict[str, tuple[float, float | None]]:
    out = {}
    for group in (cq.get("spec") or {}).get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            for r in flavor.get("resources") or []:
                if r.get("name") == TPU:
                    limit = r.get("borrowingLimit")
                    out[str(flavor["name"])] = (parse_quantity(r.get("nominalQuota", 0)),
                                                None if limit is None else parse_quantity(limit))
    return out


def _limit(chips: float | None) -> str:
    return "unlimited" if chips is None else f"{chips:g}"


def _weight(cq: dict[str, Any]) -> float:
    weight = ((cq.get("spec") or {}).get("fairSharing") or {}).get("weight", 1)
    return parse_quantity(weight)


def queue_differences(live: dict[str, Any], rendered: dict[str, Any]) -> list[str]:
    """Pure: what of the live LocalQueue/ClusterQueue differs from the rendered ones."""
    out = []
    live_lq, want_lq = live.get("local_queue") or {}, rendered.get("local_queue") or {}
    live_cq, want_cq = live.get("cluster_queue") or {}, rendered.get("cluster_queue") or {}
    live_target = (live_lq.get("spec") or {}).get("clusterQueue")
    want_target = (want_lq.get("spec") or {}).get("clusterQueue")
    if live_target != want_target:
        out.append(f"the LocalQueue points at {live_target}, not {want_target}")
    live_spec, want_spec = live_cq.get("spec") or {}, want_cq.get("spec") or {}
    for key in ("cohortName", "preemption"):
        if want_spec.get(key) is not None and live_spec.get(key) != want_spec.get(key):
            out.append(f"{key} is {live_spec.get(key)!r}, the file gives {want_spec.get(key)!r}")
    if _weight(live_cq) != _weight(want_cq):
        out.append(f"fairSharing.weight is {_weight(live_cq):g}, the file gives "
                   f"{_weight(want_cq):g}")
    live_q, want_q = _tpu_quotas(live_cq), _tpu_quotas(want_cq)
    for flavor, (nominal, limit) in want_q.items():
        if flavor not in live_q:
            out.append(f"flavor {flavor} has no {TPU} quota")
            continue
        have_nominal, have_limit = live_q[flavor]
        if (have_nominal, have_limit) != (nominal, limit):
            out.append(f"flavor {flavor}: {have_nominal:g} chips + borrowing "
                       f"{_limit(have_limit)}, the file gives {nominal:g} + {_limit(limit)}")
    return out


def check_team_queues(team_queue: str, live: dict[str, Any], rendered: dict[str, Any]
                      ) -> tuple[Status, str, str, str]:
    """(status, found, fix, target) of the team's queues on the cluster."""
    target = f"LocalQueue and ClusterQueue {team_queue} (deployments/teams.yaml)"
    if live.get("local_queue") is None or live.get("cluster_queue") is None:
        return ("fail", "the team's queues are not on the cluster: its JobSets would wait "
                "unadmitted", "re-apply the blueprint (`tpurl run` does when it deploys): it "
                "creates every team's queues from deployments/teams.yaml", target)
    fair = fair_sharing_on(live.get("manager_config"))
    if differences := queue_differences(live, rendered):
        return ("warn", "differ from the teams file: " + "; ".join(differences),
                "re-apply the blueprint so Kueue admits by the file's numbers (or revert "
                "deployments/teams.yaml)" + ("; and " + FAIR_SHARING_FIX if fair is False
                                             else ""), target)
    if fair is False:
        return ("warn", "as the teams file renders them, but Kueue's configuration has no "
                "fair sharing (deployed before the deploy set it): the teams' weights order "
                "nothing (the cohort still lends and "
                "reclaims)", FAIR_SHARING_FIX, target)
    unread = "" if fair is not None or "manager_config" not in live else \
        f" (Kueue's configuration {KUEUE_SYSTEM}/{KUEUE_MANAGER_CONFIG} not read: fair " \
        "sharing unknown)"
    return ("ok", "as the teams file renders them" + unread, "", target)
