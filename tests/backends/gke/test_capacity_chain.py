"""The capacity chain and zones against the fake regional cluster (tests/fakes/kube_api/node_groups.py):
one autoscaled TPU pool per (capacity mode, zone); a stockout in a zone backs its pool off
and the autoscaler brings the slice up in another zone; a stockout in every zone of a mode
makes the train stage fall back to the next mode of gke.capacity, resuming from the
checkpoint the first attempt wrote; a spot preemption in the fallback mode resumes again."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from flows.backends.gke import capacity_run
from flows.backends.gke.capacity_pools import pool_name, pool_node_labels, pool_taints
from flows.backends.gke.fallback import NO_QUEUED_CAPACITY
from flows.config.profile import Profile
from flows.config.teams import load_teams
from flows.core.failures import StageFailed
from tests.fakes.gke_backend import BUDGETS, ListLogger, jobsets_created, run_stage
from tests.fakes.kube_api import FakeApiServer, FakeKube
from tests.fakes.kube_api.node_groups import (
    ZONE_LABEL,
    ClusterAutoscaler,
    NodeGroup,
    regional_groups,
)
from tests.fakes.kube_api.nodepools import TPU_SELECTOR
from tests.fakes.kube_api.provisioning import QueuedProvisioning, QueuedSettings
from tests.fakes.kube_api.scenarios import admit, say, scenario, start, succeed
from tests.support.polling import until
from tests.support.profiles import capacity_overrides, fake_hf_token, tutorial_profile

ZONES = ["us-east5-a", "us-east5-b", "us-east5-c"]
RUN = [(0.05, admit), (0.05, start), (0.05, say("step 1", "saved checkpoint 1")),
       (0.1, succeed)]


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeApiServer]:
    monkeypatch.setenv("HF_TOKEN", fake_hf_token("Qx7kP2mZ9v"))
    with FakeApiServer(FakeKube()) as running:
        yield running


def groups_for(profile: Profile, **settings: Any) -> list[NodeGroup]:
    """The cluster the profile's blueprint builds: one autoscaled pool per (mode, zone), with
    the labels and taints capacity_pools.py names (flows/backends/gke/capacity_pools.py)."""
    gke = profile.gke
    assert gke is not None
    found = load_teams().team_of(profile.name)  # a team's pools carry its label and taint
    team = found.name if found else None
    groups = regional_groups(list(gke.zone_order), list(gke.capacity_chain),
                             hosts=gke.hosts_per_slice,
                             machine_type=gke.machine_type, topology=gke.topology,
                             labels=lambda mode, zone: pool_node_labels(mode, team),
                             taints=lambda mode: pool_taints(mode, team), **settings)
    for group in groups:
        group.name = pool_name(gke, group.mode, group.zone, team)
    return groups


def chain_profile(chain: str, zones: str = "us-east5-b,us-east5-a") -> Profile:
    return tutorial_profile(**capacity_overrides(chain), **{"gke.zones": zones})


def test_a_stockout_in_the_first_zone_trains_in_the_second(server, tmp_path: Path) -> None:
    profile = chain_profile("on-demand")
    groups = groups_for(profile, provision_s=0.2)
    groups[0].stockout = True  # hours long: it lasts the whole test
    scaler = ClusterAutoscaler(server.kube, groups)
    try:
        scenario(server.kube, RUN)
        budgets = dataclasses.replace(BUDGETS, schedule_s=30.0)
        outcome, logger, _log, backend = run_stage(
            server, "train", tmp_path, budgets, profile=profile)
        assert not isinstance(outcome, StageFailed), outcome
        assert jobsets_created(server.kube) == 1
        assert groups[0].failures >= 1  # it was tried, failed, and backed off
        assert [n for _, n in groups[0].history] == [0]  # no TPU node ever in zone b
        assert max(n for _, n in groups[1].history) == 8  # the whole slice in zone a
        assert backend.monitor is not None and backend.monitor.served is not None
        assert backend.monitor.served.zone == "us-east5-a"
        assert any("the slice came up in zone us-east5-a" in line for line in logger.lines)
        assert [(a["mode"], a["zone"]) for a in outcome.capacity] == [("on-demand",
                                                                       "us-east5-a")]
        assert not [n for n in scaler.tpu_nodes()
                    if n["metadata"]["labels"][ZONE_LABEL] == "us-east5-b"]
        assert until(lambda: not scaler.tpu_nodes())  # scaled back to zero
    finally:
        scaler.stop()


def queued_on(server: FakeApiServer, profile: Profile, **settings: Any
              ) -> tuple[ClusterAutoscaler, QueuedProvisioning, NodeGroup]:
    groups = groups_for(profile)
    scaler = ClusterAutoscaler(server.kube, groups)
    queued = next(g for g in groups if g.mode == "queued")
    dws = QueuedProvisioning(server.kube, scaler, queued, QueuedSettings(**settings))
    return scaler, dws, queued


def end_stockout_once_said(group: NodeGroup, logger: ListLogger, words: str,
                           within_s: float = 60.0) -> threading.Thread:
    """Capacity comes once the product has said ``words`` (or after ``within_s``, so a
    product that never says them still finishes and the test names what is missing): a
    window on the clock would race the stage's start on a loaded machine."""
    def watch() -> None:
        deadline = time.monotonic() + within_s
        while (not any(words in line for line in list(logger.lines))
               and time.monotonic() < deadline):
            time.sleep(0.05)
        group.stockout = False

    thread = threading.Thread(target=watch, daemon=True, name="capacity-comes")
    thread.start()
    return thread


def test_queued_provisioning_brings_the_whole_slice_once_capacity_comes(server,
                                                                         tmp_path: Path) -> None:
    profile = chain_profile("queued", zones="us-east5-b")
    # DWS keeps the request open long enough that only the capacity decides when it ends
    scaler, dws, group = queued_on(server, profile, fail_after_s=60.0)
    group.stockout = True
    logger = ListLogger()
    capacity = end_stockout_once_said(group, logger, "waits for queued capacity")
    try:
        scenario(server.kube, RUN)
        outcome, _, _log, backend = run_stage(server, "train", tmp_path, profile=profile,
                                              logger=logger)
        assert not isinstance(outcome, StageFailed), outcome
        assert [n for _, n in group.history][:2] == [0, 8]  # all or nothing: 8 at once
        requests = server.kube.find("provisioningrequests")
        assert [r["metadata"]["name"].rsplit("-", 1)[-1] for r in requests] == ["1"]
        assert any(c["type"] == "Provisioned" for c in requests[0]["status"]["conditions"])
        assert backend.monitor is not None and backend.monitor.served is not None
        assert backend.monitor.served.mode == "queued"
        assert any("waits for queued capacity" in line for line in logger.lines), "\n".join(logger.lines)
    finally:
        capacity.join(timeout=60.0)
        dws.stop()
        scaler.stop()


def test_queued_provisioning_that_keeps_failing_is_no_capacity(server, tmp_path: Path) -> None:
    profile = chain_profile("queued", zones="us-east5-b")
    scaler, dws, group = queued_on(server, profile, fail_after_s=0.2, backoff_limit=1,
                                   backoff_s=0.1)
    group.stockout = True
    try:
        scenario(server.kube, RUN)
        outcome, *_ = run_stage(server, "train", tmp_path, profile=profile)
        assert isinstance(outcome, StageFailed), outcome
        assert outcome.diagnosis.code == NO_QUEUED_CAPACITY, outcome.diagnosis
        assert "after 2 attempt(s)" in outcome.diagnosis.summary
        assert [n for _, n in group.history] == [0]  # nothing was ever provisioned
        # Kueue deleted the superseded first attempt; the watch counted it from the name
        assert [r["metadata"]["name"].rsplit("-", 1)[-1]
                for r in server.kube.find("provisioningrequests")] == ["2"]
    finally:
        dws.stop()
        scaler.stop()


# flex-start's first attempt trains and saves checkpoint 1 until its nodes reach their
# maximum run; its resubmission finds no flex-start slice in any zone; spot resumes from
# checkpoint 1, saves checkpoint 2, is preempted, and resumes again from checkpoint 2.
FIRST = [(0.05, admit), (0.05, start), (0.05, say("step 1", "saved checkpoint 1")),
         (30.0, succeed)]
STOCKED_OUT = [(0.05, admit), (0.05, start), (30.0, succeed)]
SPOT = [(0.05, admit), (0.05, start), (0.05, say("restored checkpoint 1", "step 2",
                                                  "saved checkpoint 2")), (30.0, succeed)]
SPOT_AGAIN = [(0.05, admit), (0.05, start), (0.05, say("restored checkpoint 2", "step 3")),
              (0.1, succeed)]


def test_a_stockout_in_every_zone_falls_back_to_the_next_mode_and_resumes(
        server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[dict[str, Any]] = []
    monkeypatch.setattr(capacity_run, "emit_event", lambda **kw: events.append(kw))
    profile = chain_profile("flex-start,spot")
    groups = groups_for(profile, provision_s=0.2)
    flex = [g for g in groups if g.mode == "flex-start"]
    for group in flex:
        group.max_run_s = 1.0
    scaler = ClusterAutoscaler(server.kube, groups)

    def faults() -> None:
        # once flex-start's slice is up, flex-start has no more capacity in any zone
        if until(lambda: scaler.nodes and scaler.pool.mode == "flex-start", within_s=60):
            for group in flex:
                group.stockout = True
        # spot's slice is preempted once it saved checkpoint 2
        if until(lambda: scaler.nodes and scaler.pool.mode == "spot" and any(
                "saved checkpoint 2" in line for _, line in _head_log(server.kube)),
                within_s=60):
            time.sleep(0.5)  # the watch has seen the slice (a cluster never reclaims in ms)
            scaler.preempt()
    threading.Thread(target=faults, daemon=True).start()
    budgets = dataclasses.replace(BUDGETS, schedule_s=2.5, queue_s=60.0)
    try:
        scenario(server.kube, FIRST, STOCKED_OUT, SPOT, SPOT_AGAIN)
        outcome, logger, log_uri, _backend = run_stage(server, "train", tmp_path, budgets,
                                                       profile=profile)
        assert not isinstance(outcome, StageFailed), outcome.diagnosis
        names = {name for (plural, name), _ in server.kube.created.items()
                 if plural == "jobsets"}
        assert len(names) == 1 and jobsets_created(server.kube) == 4  # one run name
        assert [(a["mode"], a["outcome"]) for a in outcome.capacity] == [
            ("flex-start", "preempted"), ("flex-start", "no-capacity"), ("spot", "preempted"),
            ("spot", "succeeded")]
        assert outcome.capacity[1]["zone"] == "" and outcome.capacity[1]["usd"] == 0.0
        assert outcome.capacity[0]["chip_hours"] > 0 and outcome.capacity[2]["usd"] > 0, (
            outcome.capacity, logger.lines)
        assert all(g.failures >= 1 for g in flex)  # every flex-start zone was tried
        assert outcome.preemptions == 2
        text = Path(log_uri.removeprefix("file://")).read_text()
        assert "falling back to spot" in text
        assert text.index("saved checkpoint 1") < text.index("restored checkpoint 1") < \
            text.index("saved checkpoint 2") < text.index("restored checkpoint 2")
        assert [e["event"] for e in events] == ["tpurl.capacity.fallback"]
        assert events[0]["payload"]["from_mode"] == "flex-start"
        assert events[0]["payload"]["to_mode"] == "spot"
        assert any("capacity: flex-start" in line for line in logger.lines)
        assert until(lambda: not scaler.tpu_nodes())
    finally:
        scaler.stop()


def _head_log(kube: FakeKube) -> list[tuple[Any, str]]:
    with kube.cond:
        return [entry for lines in kube.logs.values() for entry in lines]


def test_the_fake_autoscaler_backs_a_failing_group_off_exponentially_then_picks_another(
        ) -> None:
    """clusterstate's backoffNodeGroup and utils/backoff/exponential_backoff.go, as the fake
    plays them: per group, doubling to the maximum; the expander picks among the groups not
    backed off that every pod fits (all or nothing)."""
    groups = regional_groups(ZONES[:2], ["on-demand", "spot"],
                             labels=lambda mode, zone: pool_node_labels(mode))
    scaler = ClusterAutoscaler(FakeKube(), groups, tick_s=3600.0, initial_backoff_s=1.0,
                               max_backoff_s=4.0)
    pod = {"metadata": {"name": "worker-0", "uid": "u"}, "spec": {
        "nodeSelector": {TPU_SELECTOR: "tpu-v6e-slice", **pool_node_labels("on-demand")},
        "tolerations": [{"key": "google.com/tpu", "operator": "Exists"}]}}
    try:
        for failure, backoff in enumerate([1.0, 2.0, 4.0, 4.0]):
            now = 10.0 * failure  # each failure after the previous back-off ended
            scaler._failed(groups[0], [pod], now)
            assert groups[0].backoff_s == backoff
        assert scaler._best_option([pod], 30.5) is groups[1]  # zone a while b backs off
        assert scaler._best_option([pod], 34.5) is groups[0]  # b again once it ended
        spot = {**pod, "spec": {**pod["spec"], "nodeSelector": pool_node_labels("spot")}}
        assert scaler._best_option([pod, spot], 34.5) is None  # no group holds both
    finally:
        scaler.stop()


def test_a_rerun_after_a_fallback_attaches_to_the_later_modes_jobset(server,
                                                                      tmp_path: Path) -> None:
    """The flow process died after falling back to spot: the cluster holds the run's JobSet
    as the spot step rendered it. The rerun starts in that step and attaches, instead of
    refusing it as a JobSet of another configuration (recovery.on_conflict)."""
    from flows.backends.gke import recovery
    from flows.backends.gke.jobs.manifests import job_of
    from flows.backends.gke.watch.client import JOBSET_GROUP, JOBSET_VERSION, JOBSETS
    from flows.core.layout import Layout
    from flows.stages.train import train_workload
    from tests.fakes.gke_backend import ListLogger, make_backend

    profile = chain_profile("flex-start,spot")
    scenario(server.kube, [(0.05, admit), (0.05, start), (0.05, say("restored checkpoint 1")),
                           (1.5, say("step 2")), (0.2, succeed)])
    earlier = make_backend(server.url, "train", tmp_path, ListLogger(), profile=profile)
    workload = train_workload(profile, Layout(profile), earlier.runtime)
    spot = earlier.capacity.jobset_for(workload, job_of("train", workload.name), "spot")
    earlier.cluster.custom.create_namespaced_custom_object(
        JOBSET_GROUP, JOBSET_VERSION, profile.gke.namespace, JOBSETS,
        recovery.numbered(spot, 2))
    outcome, logger, log_uri, backend = run_stage(server, "train", tmp_path, profile=profile)
    assert not isinstance(outcome, StageFailed), outcome.diagnosis
    assert jobsets_created(server.kube) == 1 and backend.submitted == []
    assert any("step spot of the capacity chain" in line for line in logger.lines), logger.lines
    assert "step 2" in Path(log_uri.removeprefix("file://")).read_text()
    assert [a["mode"] for a in outcome.capacity] == ["spot"]
