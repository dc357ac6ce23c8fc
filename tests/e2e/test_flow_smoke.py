"""The smoke profile through one flow run against the same fakes as the tutorial's
(tests/support/gke_world.py): image, infra on an on-demand pool that scales from zero, convert,
a 4-step training on the 2-host Pathways slice under its spend cap, export. One run, so the
profile costs this module one flow's time; the tutorial's module covers reruns and failures."""

from __future__ import annotations

import pytest

from flows.pipeline import rl_post_training
from tests.fakes.kube_api.scenarios import admit, say, start, succeed
from tests.support.gke_world import GkeWorld
from tests.support.profiles import SMOKE

STAGES = ["image", "infra", "convert", "train", "export"]


@pytest.mark.parametrize("capacity", ["on-demand"])
def test_the_smoke_profile_runs_end_to_end(gke_world: GkeWorld, capacity: str) -> None:
    world, programs = gke_world, gke_world.programs
    train = [(0.1, admit), (0.05, start), (0.05, programs.echo_token()),
             (0.05, say("Train step 3 training loss: 0.710000 perplexity: 2.03")),
             (0.05, programs.train_checkpoint(4)),
             (0.05, programs.train_events({1: 0.9, 3: 0.71}, "pathways-head-0")),
             (0.05, say("Saving checkpoint at step 4")), (0.1, succeed)]
    world.kube.scripts = [programs.convert(), train, programs.export()]
    overrides = {k: v for k, v in world.overrides.items() if k != "gke.reservation"}
    state = rl_post_training(profile=SMOKE, overrides={**overrides, "gke.capacity": capacity},
                             return_state=True)
    result = state.result()
    assert world.kube.scripts == [], "every scripted JobSet was submitted"
    assert [s.stage for s in result.stages] == STAGES
    statuses = {s.stage: s.status for s in result.stages}
    # the patched image may already be in the registry from another test (same content tag)
    assert statuses.pop("image") in ("ran", "skipped")
    assert statuses == dict.fromkeys(STAGES[1:], "ran")
    assert result.artifacts["trained_checkpoint"].endswith("/checkpoints/actor/4/model_params")
    assert result.artifacts["hf_export"].startswith(f"gs://{world.bucket}/qwen3-0.6b/")
    # the slice the infra stage deployed is the profile's: autoscaled, no reservation
    cluster = world.apis.get_cluster("my-proj-123", "us-east5", "tpurl-v6e")
    assert cluster is not None
    (pool,) = [p for p in cluster["nodePools"] if p["name"].startswith("gke-tpu")]
    assert pool["placementPolicy"]["tpuTopology"] == "2x4"
    scaling = pool["autoscaling"]
    assert (scaling["enabled"], scaling["minNodeCount"], scaling["maxNodeCount"]) == (True, 0, 2)
    # the training ran as one Pathways JobSet with two workers
    with world.kube.cond:
        jobsets = [o for _, plural, kind, o in world.kube.history
                   if plural == "jobsets" and kind == "ADDED"]
    (train_js,) = [j for j in jobsets if j["metadata"]["labels"]["tpurl/stage"] == "train"]
    workers = [rj for rj in train_js["spec"]["replicatedJobs"] if rj["name"] == "worker"]
    assert workers[0]["template"]["spec"]["parallelism"] == 2
    # and its cost stayed far under the cap (seconds of fake training)
    assert 0 < result.chip_hours < 1
