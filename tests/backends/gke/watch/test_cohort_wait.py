"""The GKE backend's watch on a team's JobSet that waits for chips another team of the cohort
borrows: the stage log names the borrower ("waiting: team-b borrows 16 of 32 chips"), read
from the ClusterQueues' status.flavorsUsage, then follows the JobSet once Kueue admits it.
The Workload's pending message and the ClusterQueues are what tests/fakes/kueue_cohort.py
(Kueue's decision) writes, in the order Kueue writes them: QuotaReserved=False (Pending)
first, then QuotaReserved=True and Admitted=True on admission."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from flows.core.failures import StageFailed
from tests.fakes.gke_backend import run_stage
from tests.fakes.kube_api import FakeApiServer, FakeKube
from tests.fakes.kube_api.scenarios import admit, pending, say, scenario, start, succeed
from tests.fakes.kueue_cohort import Cohort, Queue
from tests.support.profiles import SMOKE, TUTORIAL, fake_hf_token

FLAVOR = "tpu-on-demand"


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[FakeApiServer]:
    monkeypatch.setenv("HF_TOKEN", fake_hf_token("cohortwait"))
    teams = tmp_path / "teams.yaml"
    teams.write_text(f"teams:\n  a: {{usd_per_month: 5000, profiles: [{TUTORIAL}]}}\n"
                     f"  b: {{usd_per_month: 5000, profiles: [{SMOKE}]}}\n")
    monkeypatch.setenv("TPURL_TEAMS_FILE", str(teams))
    with FakeApiServer(FakeKube()) as srv:
        yield srv


def test_a_team_waiting_behind_a_borrower_is_told_who_borrows(server: FakeApiServer,
                                                              tmp_path: Path) -> None:
    cohort = Cohort(FLAVOR, {"team-a": Queue("team-a", 16, 16), "team-b": Queue("team-b", 16, 16)})
    cohort.submit("b-run", "team-b", 32)
    assert cohort.schedule() == ["b-run"]
    ours = cohort.submit("a-run", "team-a", 16)
    assert cohort.schedule() == []
    [why] = [c["message"] for c in cohort.workload_object(ours)["status"]["conditions"]]
    for cq in cohort.cluster_queue_objects("tpurl-cluster"):
        server.kube.create("clusterqueues", "", cq)
    kube = scenario(server.kube, [(0.05, pending(why)), (1.5, admit), (0.05, start),
                                  (0.05, say("step 1")), (0.1, succeed)])
    outcome, logger, _, _ = run_stage(server, "train", tmp_path)
    assert not isinstance(outcome, StageFailed), outcome
    queued = [line for line in logger.lines if "is queued" in line]
    assert any("waiting: team-b borrows 16 of 32 chips" in line
               and "insufficient unused quota" in line for line in queued), logger.lines
    assert kube.find("workloads")[0]["spec"]["queueName"] == "team-a"
