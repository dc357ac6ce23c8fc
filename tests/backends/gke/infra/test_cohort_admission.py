"""Admission by cohort for the teams' ClusterQueues, with the fake of Kueue's decision in
tests/fakes/kueue_cohort.py (kueue v0.17.1 pkg/cache/scheduler/resource_node.go available /
potentialAvailable, pkg/scheduler/flavorassigner/flavorassigner.go fitsResourceQuota,
pkg/scheduler/fair_sharing_iterator.go entryComparer.less, pkg/cache/scheduler/
fair_sharing.go dominantResourceShare), fed the numbers the teams file renders
(infra/team_quota.py); and the watch's line for a team waiting behind a borrower
(watch/kueue_cohort.py) from the Workload and ClusterQueues the fake writes."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from flows.backends.gke.capacity_pools import flavor_name
from flows.backends.gke.infra.kueue_objects import KUEUE_TEMPLATE, kueue_documents
from flows.backends.gke.infra.team_quota import team_quotas
from flows.backends.gke.watch.kueue import status_line
from flows.backends.gke.watch.kueue_cohort import cohort_wait
from flows.config import load_profile
from flows.config.teams import load_teams
from tests.fakes.kueue_cohort import Cohort, Queue
from tests.support.profiles import SMOKE, TUTORIAL, TUTORIAL_REQUIRED

CLUSTER = 32


def _cohort(tmp_path: Path, a: str = "", b: str = "") -> Cohort:
    """Teams a and b of the tutorial's 32-chip cluster on demand, from the ClusterQueues the
    deploy stages for them (the product's rendering of the teams file, read by the fake as
    Kueue reads the applied objects), so a quota rendered wrong admits wrong here."""
    path = tmp_path / "teams.yaml"
    path.write_text(f"teams:\n  a: {{usd_per_month: 5, profiles: [{TUTORIAL}]{a}}}\n"
                    f"  b: {{usd_per_month: 5, profiles: [{SMOKE}]{b}}}\n")
    gke = load_profile(TUTORIAL, {**TUTORIAL_REQUIRED, "gke.capacity": "on-demand",
                                  "gke.reservation": ""}, environ={}).gke
    assert gke is not None and gke.total_chips == CLUSTER
    objects = kueue_documents(KUEUE_TEMPLATE.read_text(), gke,
                              team_quotas(load_teams(path), CLUSTER))
    flavor = flavor_name("on-demand", gke.machine.generation)
    cohort = Cohort.from_cluster_queues(
        [o for o in objects if o["metadata"]["name"] in ("team-a", "team-b")], flavor)
    assert set(cohort.queues) == {"team-a", "team-b"}
    return cohort


def test_a_team_within_its_nominal_quota_is_admitted(tmp_path: Path) -> None:
    cohort = _cohort(tmp_path)
    cohort.submit("a-1", "team-a", 16)
    cohort.submit("b-1", "team-b", 16)
    assert sorted(cohort.schedule()) == ["a-1", "b-1"]


def test_a_team_over_its_quota_borrows_only_unused_quota_up_to_its_limit(
        tmp_path: Path) -> None:
    cohort = _cohort(tmp_path, a=", borrowing_limit_chips: 8")
    cohort.submit("b-1", "team-b", 8)
    cohort.submit("a-1", "team-a", 24)  # 16 its own + 8 of b's unused 8
    assert sorted(cohort.schedule()) == ["a-1", "b-1"]
    cohort.finish("a-1")
    cohort.submit("a-2", "team-a", 32)  # above 16 + 8: never, whatever is free
    assert cohort.schedule() == []
    [cond] = cohort.workload_object(cohort.workloads[-1])["status"]["conditions"]
    assert "> maximum capacity (24)" in cond["message"]
    # 24 is within 16 + 8, but b (first: it does not borrow) then holds 12 of its 16:
    # only 4 are unused to borrow
    cohort.finish("a-2")
    cohort.submit("a-3", "team-a", 24)
    cohort.submit("b-2", "team-b", 4)
    admitted = cohort.schedule()
    assert "a-3" not in admitted and admitted == ["b-2"]


def test_with_fair_sharing_the_team_with_the_lower_share_goes_first(tmp_path: Path) -> None:
    cohort = _cohort(tmp_path, b=", fair_weight: 2")
    cohort.submit("a-1", "team-a", 16)
    cohort.submit("b-1", "team-b", 16)
    assert sorted(cohort.schedule()) == ["a-1", "b-1"]
    cohort.finish("a-1")
    cohort.finish("b-1")
    # each wants 8 above its 16; a's head was submitted first, but with weight 2 b's share
    # (8 borrowed per 32 lendable, halved) is the lower
    cohort.submit("a-2", "team-a", 24)
    cohort.submit("b-2", "team-b", 24)
    assert cohort.schedule() == ["b-2"]
    assert cohort.queues["team-b"].usage == 24


def test_a_head_within_nominal_goes_before_a_borrowing_one(tmp_path: Path) -> None:
    cohort = _cohort(tmp_path, b=", fair_weight: 100")
    cohort.submit("b-1", "team-b", 24)  # borrows, however light its share
    cohort.submit("a-1", "team-a", 16)  # within its nominal
    assert cohort.schedule() == ["a-1"]


def test_the_watch_names_the_team_that_borrows(tmp_path: Path) -> None:
    cohort = _cohort(tmp_path)
    cohort.submit("b-1", "team-b", 32)  # all of a's idle quota too
    assert cohort.schedule() == ["b-1"]
    waiting = cohort.submit("a-1", "team-a", 16)
    assert cohort.schedule() == []
    workload = cohort.workload_object(waiting)
    why, _, admitted = status_line(workload)
    assert not admitted and "insufficient unused quota for google.com/tpu" in why
    line = cohort_wait(workload, "team-a", cohort.cluster_queue_objects("tpurl-cluster"))
    assert line == "waiting: team-b borrows 16 of 32 chips"
    # nobody borrows: Kueue's own words are all there is
    cohort.finish("b-1")
    cohort.submit("b-2", "team-b", 16)
    cohort.submit("a-2", "team-a", 24)
    cohort.schedule()
    pending = cohort.workload_object(next(w for w in cohort.workloads if not w.admitted))
    assert cohort_wait(pending, pending["spec"]["queueName"],
                       cohort.cluster_queue_objects("tpurl-cluster")) is None


SUBMISSION = st.tuples(st.sampled_from(["team-a", "team-b", "team-c"]),
                       st.sampled_from([4, 8, 16, 24, 32]), st.integers(0, 1), st.booleans())


@settings(max_examples=150, deadline=None)
@given(st.lists(SUBMISSION, min_size=1, max_size=12),
       st.tuples(st.none() | st.integers(0, 16), st.none() | st.integers(0, 16),
                 st.none() | st.integers(0, 16)),
       st.booleans())
def test_no_order_of_submissions_breaks_a_limit(submissions: list[tuple[str, int, int, bool]],
                                                limits: tuple[int | None, ...],
                                                fair: bool) -> None:
    nominal = {"team-a": 16, "team-b": 8, "team-c": 8}
    cohort = Cohort("tpu-on-demand", {name: Queue(name, chips, limit) for (name, chips), limit
                             in zip(nominal.items(), limits, strict=True)})
    for index, (queue, chips, priority, finish_one) in enumerate(submissions):
        cohort.submit(f"w{index}", queue, chips, priority)
        cohort.schedule(fair_sharing=fair)
        running = [w for w in cohort.workloads if w.admitted]
        if finish_one and running:
            cohort.finish(running[0].name)
        for q in cohort.queues.values():
            assert q.usage <= q.nominal + (q.borrowing_limit if q.borrowing_limit is not None
                                           else CLUSTER)
            assert q.usage == sum(w.chips for w in cohort.workloads
                                  if w.admitted and w.queue == q.name)
        assert cohort.used <= cohort.quota == CLUSTER
