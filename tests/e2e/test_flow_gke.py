"""The GKE profile through ONE Prefect flow run, end to end, and a canary token found nowhere.

The pieces are tested one by one elsewhere (tests/backends/gke/{image,infra,…}); this runs
``rl_post_training`` for ``qwen3-30b-a3b-v6e-32`` with all of them wired together, which is
what catches hand-offs no unit test sees: the pushed digest reaching the JobSets, infra's
bucket holding the lineage, the train resubmission after a preemption resuming under the same
run name, metrics read from GCS, and a rerun skipping every stage from the bucket alone.

Four flow runs share one world (tests/support/gke_world.py): the first runs everything
(training is preempted once and resubmitted), the second finds everything done, the third
changes an export argument and its exporter fails with a traceback that quotes the token, the
fourth adds an eval section: only the evaluate stage runs (two JobSets on the slice, its
program shipped in a ConfigMap), and the better trained model is promoted in the bucket. The
canary HF token is set for all four; afterwards every place it could leak to is read back and
searched.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from prefect.states import State

from flows.core.failures import FailureCategory, StageFailed
from flows.core.redaction import forms
from flows.pipeline import rl_post_training
from flows.run.result import PipelineResult, StageReport
from tests.support.gke_world import CANARY, GkeWorld
from tests.support.profiles import TUTORIAL
from tests.support.results import stage_statuses

ROOT = Path(__file__).resolve().parents[2]

ENCODED = base64.b64encode(CANARY.encode()).decode()
STAGES = ["image", "infra", "convert", "train", "export"]
GKE_STAGES = ("convert", "train", "export")
EVAL = {"eval.batches": "2"}  # the dataset's test split, promotion by the default rule
BASE_REWARD, TRAINED_REWARD = 0.25, 0.75


@dataclass
class Runs:
    """The three flow runs and what the world looked like after each."""

    first: PipelineResult
    first_id: UUID
    rerun: PipelineResult
    rerun_id: UUID
    failed: BaseException
    failed_state: State[Any]
    failed_id: UUID
    evaluated: PipelineResult
    started: datetime
    rerun_requests: list[str]  # API requests of the rerun, less any from a watch thread
    jobsets_after_first: dict[str, int]
    jobsets_after_rerun: dict[str, int]


def _jobsets_created(world: GkeWorld) -> dict[str, int]:
    with world.kube.cond:
        return {name: n for (plural, name), n in world.kube.created.items() if plural == "jobsets"}


def _run(world: GkeWorld, **extra: str) -> tuple[State[Any], UUID]:
    state = rl_post_training(profile=TUTORIAL, overrides={**world.overrides, **extra},
                             return_state=True)
    flow_run_id = state.state_details.flow_run_id
    assert flow_run_id is not None
    return state, flow_run_id


@pytest.fixture(scope="module")
def runs(gke_world: GkeWorld) -> Iterator[Runs]:
    world, programs = gke_world, gke_world.programs
    started = datetime.now(UTC) - timedelta(seconds=5)
    world.kube.scripts = [programs.convert(), programs.train_preempted(),
                          programs.train_resumed(), programs.export()]
    state, first_id = _run(world)
    first = state.result()
    assert world.kube.scripts == [], "every scripted JobSet was submitted"
    requests_after_first, jobsets_after_first = len(world.kube.requests), _jobsets_created(world)

    state, rerun_id = _run(world)
    rerun = state.result()
    with world.kube.cond:  # a first-run watch thread may still be winding down: not counted
        rerun_requests = [f"{method} {path}" for _, method, path in
                          world.kube.requests[requests_after_first:]
                          if "watch=" not in path and "Selector=" not in path]
    jobsets_after_rerun = _jobsets_created(world)

    world.kube.scripts = [programs.export_fails()]
    failed_state, failed_id = _run(world, **{"export.args.weight_dtype": "float32"})
    assert failed_state.is_failed(), failed_state
    failed = failed_state.result(raise_on_failure=False)
    assert isinstance(failed, BaseException), failed

    world.kube.scripts = [programs.evaluate(BASE_REWARD), programs.evaluate(TRAINED_REWARD)]
    state, _ = _run(world, **EVAL)
    evaluated = state.result()
    assert world.kube.scripts == [], "both evaluation JobSets were submitted"
    yield Runs(first, first_id, rerun, rerun_id, failed, failed_state, failed_id, evaluated,
               started, rerun_requests, jobsets_after_first, jobsets_after_rerun)


def _stage(result: PipelineResult, name: str) -> StageReport:
    return next(s for s in result.stages if s.stage == name)


def test_first_run_produces_three_gcs_artifacts(runs: Runs, gke_world: GkeWorld) -> None:
    result, bucket = runs.first, gke_world.bucket
    assert [s.stage for s in result.stages] == STAGES
    assert stage_statuses(result) == dict.fromkeys(STAGES, "ran")
    assert set(result.artifacts) == {"maxtext_checkpoint", "trained_checkpoint", "hf_export"}
    for uri in result.artifacts.values():
        assert uri.startswith(f"gs://{bucket}/qwen3-30b-a3b/"), uri
    assert result.artifacts["maxtext_checkpoint"].endswith("/0/items")
    assert result.artifacts["trained_checkpoint"].endswith("/checkpoints/actor/50/model_params")
    # chip-hours: the slice is held by the three cluster stages, not by the image build
    for name in GKE_STAGES:
        assert _stage(result, name).chip_hours > 0, name
        assert _stage(result, name).workloads, name
    assert _stage(result, "image").chip_hours == 0
    assert result.chip_hours > 0
    # metrics came from the TensorBoard file the trainer wrote to the bucket
    assert [s["step"] for s in result.metrics["steps"]] == [10, 30, 49]
    assert result.metrics["event_files"] == 1


def test_the_built_image_is_what_every_jobset_runs(runs: Runs, gke_world: GkeWorld) -> None:
    image = _stage(runs.first, "image").uris["image"]
    assert image.startswith(gke_world.image_repository + "@sha256:"), image
    with gke_world.kube.cond:
        history = [o for _, plural, kind, o in gke_world.kube.history
                   if plural == "jobsets" and kind == "ADDED"]
    images = {c["image"] for js in history for rjob in js["spec"]["replicatedJobs"]
              for c in rjob["template"]["spec"]["template"]["spec"]["containers"]
              if c["name"] == "workload-container"}
    assert images == {image}
    # and the programs were started on the upstream outputs
    calls = gke_world.programs.invocations
    convert_dir = calls[0].path("base_output_directory")
    train = [c for c in calls if c.module.endswith("train_rl")]
    assert {c.path("load_parameters_path") for c in train} == {f"{convert_dir}/0/items"}
    export = next(c for c in calls if c.module.endswith("to_huggingface"))
    assert export.path("load_parameters_path") == runs.first.artifacts["trained_checkpoint"]


def test_training_was_preempted_and_resubmitted_once(runs: Runs, gke_world: GkeWorld) -> None:
    created = runs.jobsets_after_first
    (train,) = [name for name in created if name.startswith("train-")]
    assert created[train] == 2, created  # the same JobSet name, submitted twice
    assert sorted(n for name, n in created.items() if name != train) == [1, 1]
    log_uri = _stage(runs.first, "train").workloads[0].log_uri
    bucket, _, name = log_uri.removeprefix("gs://").partition("/")
    kept = gke_world.gcs.bucket(bucket).blob(name).download_as_text()
    assert "preempted; resubmitting" in kept and "Restoring checkpoint from step 10" in kept
    assert "HF_TOKEN=***" in kept  # the echo happened, redacted
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    with get_client(sync_client=True) as client:
        tasks = client.read_task_runs(flow_run_filter=FlowRunFilter(
            id=FlowRunFilterId(any_=[runs.first_id])))
    assert len(tasks) == 5 and all(t.run_count == 1 for t in tasks), \
        [(t.name, t.run_count) for t in tasks]  # resubmitted by the backend, not retried


def test_rerun_skips_every_stage_without_touching_the_cluster(runs: Runs) -> None:
    assert stage_statuses(runs.rerun) == dict.fromkeys(STAGES, "skipped")
    assert runs.rerun.artifacts == runs.first.artifacts
    assert all(not s.workloads for s in runs.rerun.stages)
    assert runs.jobsets_after_rerun == runs.jobsets_after_first
    assert runs.rerun_requests == [], runs.rerun_requests  # the backend never connected


def test_a_failed_export_names_its_cause_without_the_token(runs: Runs) -> None:
    failure = runs.failed
    assert isinstance(failure, StageFailed), repr(failure)
    assert failure.stage == "export"
    assert failure.diagnosis.category is FailureCategory.USER_ERROR
    assert "HfHubHTTPError: 401 for token ***" in failure.diagnosis.detail


def test_evaluation_runs_on_the_slice_with_its_shipped_program_and_promotes(
        runs: Runs, gke_world: GkeWorld) -> None:
    from flows.core.layout import Layout
    from flows.core.promotion_store import pointer_uris
    from tests.support.profiles import tutorial_profile

    result, world = runs.evaluated, gke_world
    assert stage_statuses(result) == {**dict.fromkeys(STAGES, "skipped"), "evaluate": "ran"}
    evaluate = _stage(result, "evaluate")
    assert [w.name for w in evaluate.workloads] == ["evaluate-base", "evaluate-trained"]
    assert evaluate.chip_hours > 0  # it held the slice
    with world.kube.cond:
        jobsets = [o for _, plural, kind, o in world.kube.history
                   if plural == "jobsets" and kind == "ADDED"][-2:]
        configmaps = [o for (plural, _, _), o in world.kube.objects.items()
                      if plural == "configmaps"]
    assert [j["metadata"]["labels"]["tpurl/stage"] for j in jobsets] == \
        ["evaluate-base", "evaluate-trained"]
    assert all([r["name"] for r in j["spec"]["replicatedJobs"]] == ["pathways-head", "worker"]
               for j in jobsets)  # on the slice, like training
    (configmap,) = configmaps
    program = (ROOT / "images/rehearsal/evaluate_rl.py").read_text()
    assert configmap["immutable"] is True and configmap["data"] == {"evaluate_rl.py": program}
    base, trained = world.programs.invocations[-2:]
    profile = tutorial_profile(**{**world.overrides, **EVAL})
    layout = Layout(profile)
    assert base.path("load_parameters_path") == layout.converted_checkpoint.rstrip("/")
    assert trained.path("load_parameters_path").endswith("/model_params")
    assert trained.args["num_test_batches"] == "2" and "HF_TOKEN" in trained.env
    evaluation = result.evaluation
    assert evaluation is not None
    assert evaluation["base"]["mean_reward"]["value"] == BASE_REWARD
    assert evaluation["trained"]["mean_reward"]["value"] == TRAINED_REWARD
    assert evaluation["decision"]["promoted"] is True
    pointer_uri = pointer_uris(profile)[0]
    assert pointer_uri.startswith(f"gs://{world.bucket}/")
    bucket, _, name = pointer_uri.removeprefix("gs://").partition("/")
    pointer = json.loads(world.gcs.bucket(bucket).blob(name).download_as_text())
    assert pointer["model_uri"] == runs.first.artifacts["hf_export"]


# --- the canary ------------------------------------------------------------------------------
def _flush_prefect() -> None:
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    APILogWorker.drain_all(timeout=10)
    EventsWorker.drain_all(timeout=10)


def _logs(flow_run_ids: list[UUID]) -> list[str]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

    texts: list[str] = []
    with get_client(sync_client=True) as client:
        while True:
            page = client.read_logs(log_filter=LogFilter(
                flow_run_id=LogFilterFlowRunId(any_=flow_run_ids)), limit=200, offset=len(texts))
            texts += [log.message for log in page]
            if len(page) < 200:
                return texts


def _events(since: datetime, expect: int) -> list[Any]:
    """Every event since the module started; waits until the server has stored at least
    ``expect`` tpurl.model.exported or tpurl.stage.failed events (the server stores events
    asynchronously)."""
    from prefect.client.orchestration import get_client
    from prefect.events.filters import EventFilter, EventOccurredFilter

    deadline = time.monotonic() + 20
    with get_client(sync_client=True) as client:
        while True:
            page = client.read_events(filter=EventFilter(
                occurred=EventOccurredFilter(since=since)), limit=50)
            events = list(page.events)
            while page.next_page:
                page = client.read_events_page(str(page.next_page))
                events += page.events
            done = [e for e in events if e.event in ("tpurl.model.exported",
                                                     "tpurl.stage.failed")]
            if len(done) >= expect or time.monotonic() > deadline:
                return events
            time.sleep(0.3)


def _artifacts() -> list[Any]:
    """All artifacts, not only those linked to the three runs: the training progress artifact
    is created from the backend's log thread, outside the run context, and is not linked."""
    from prefect.client.orchestration import get_client

    found: list[Any] = []
    with get_client(sync_client=True) as client:
        while True:
            page = client.read_artifacts(limit=200, offset=len(found))
            found += page
            if len(page) < 200:
                return found


def test_the_canary_is_found_nowhere(runs: Runs, gke_world: GkeWorld) -> None:
    world = gke_world
    ids = [runs.first_id, runs.rerun_id, runs.failed_id]
    _flush_prefect()

    # 1. the Kubernetes API: every object it holds and every version it ever stored; the
    #    Secret's data is the one place the value may be, and only base64-encoded there
    with world.kube.cond:
        stored = list(world.kube.objects.values())
        versions = [o for _, _, _, o in world.kube.history]
    secrets = [o for o in stored + versions if o["kind"] == "Secret"]
    assert secrets and all(s["data"] == {"value": ENCODED} for s in secrets)
    assert all("stringData" not in s for s in secrets)
    objects = [o for o in stored + versions if o["kind"] != "Secret"]
    objects += [{k: v for k, v in s.items() if k != "data"} for s in secrets]
    assert {o["kind"] for o in objects} >= {"JobSet", "Job", "Pod", "Workload", "Secret"}
    texts: dict[str, str] = {"kubernetes objects": json.dumps(objects)}

    # 2. the flow's logs, read back from the Prefect API
    logs = _logs(ids)
    texts["prefect logs"] = "\n".join(logs)

    # 3. results, artifacts, events, exception texts
    texts["results"] = runs.first.model_dump_json() + runs.rerun.model_dump_json()
    artifacts = _artifacts()
    assert any(a.key and a.key.endswith("-hf-export") for a in artifacts), artifacts
    texts["artifacts"] = json.dumps([a.model_dump(mode="json") for a in artifacts])
    events = _events(runs.started, expect=3)
    names = {e.event for e in events}
    assert {"tpurl.stage.started", "tpurl.stage.completed", "tpurl.stage.skipped",
            "tpurl.stage.failed", "tpurl.model.exported"} <= names, names
    texts["events"] = json.dumps([e.model_dump(mode="json") for e in events])
    failure = runs.failed
    diagnosis = getattr(failure, "diagnosis", None)
    texts["exception"] = "\n".join([
        str(failure), repr(failure), str(runs.failed_state.message),
        *([diagnosis.summary, diagnosis.detail, diagnosis.fix] if diagnosis else [])])

    # 4. every file in the bucket (outputs, kept logs, lineage, results, Terraform state)
    #    and every file the fakes and caches wrote on this machine
    blobs = list(world.gcs.list_blobs(world.bucket))
    assert any(b.name.endswith("tpurl-lineage.json") for b in blobs)
    assert any("/tpurl-results/" in f"/{b.name}" for b in blobs)
    texts["bucket"] = "\n".join(b.download_as_bytes().decode("latin-1") for b in blobs)
    texts["local files"] = "\n".join(p.read_bytes().decode("latin-1")
                                     for p in world.home.rglob("*") if p.is_file())

    # the source really held the value (else the test would prove nothing)
    with world.kube.cond:
        printed = "\n".join(line for lines in world.kube.logs.values() for _, line in lines)
    # every form it takes when printed: plain, base64 at any alignment, escaped, URL-quoted
    leaks = [where for where, text in texts.items() if any(f in text for f in forms(CANARY))]
    assert leaks == [], f"the canary leaked into: {leaks}"
    # ...and the search was not vacuous: the programs printed the value, the flow saw it
    assert CANARY in printed
    assert any("HF_TOKEN=***" in line for line in logs), "the echo reached the task log"
    assert any("preempted" in line for line in logs)
