"""The run page while the run goes on, on a real Prefect API: the real flow with five
instant stand-in stages (one held at a gate), so the page can be read mid-run.

What is asserted is what a user sees: the stage table updated in place as stages end, the
converted checkpoint's link published when convert ends (hours before the run does on GKE),
a gs:// output as a Cloud Console link, a local one as its path, and skipped stages ending
as Completed(name="Skipped") in the run graph.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId, FlowRunFilter

from flows import pipeline
from flows.backends.local.backend import LocalBackend
from flows.common.paths import REPO_ROOT
from flows.core.stage import StageOutput
from flows.runpage.live import OUTPUTS_TITLE, console_url, output_markdown, skipped_state
from tests.support.prefect_server import wait_until

CHECKPOINT = "gs://tpurl-bucket/rehearsal/maxtext/ckpt-0"
FIVE_STAGES = {"eval": "", "promotion": "", "watch": ""}  # the stubs are the five stages, no evaluate
RUNS: list[str] = []  # the flow run ids the stand-in stages ran in


class GatedStage:
    """Stands in for a Stage: returns its output at once, or after ``gate`` is set."""

    def __init__(self, name: str, status: str, uris: dict[str, str],
                 gate: threading.Event | None = None, details: dict[str, Any] | None = None):
        self.name, self.status, self.uris, self.gate = name, status, uris, gate
        self.details = details or {}

    def execute(self, ctx, upstream) -> StageOutput:
        from prefect.runtime import flow_run

        RUNS.append(flow_run.id)
        if self.gate is not None:
            assert self.gate.wait(120), "the test never opened the gate"
        return StageOutput(stage=self.name, status=self.status, key=f"k-{self.name}",
                           fingerprint=f"f-{self.name}", uris=self.uris,
                           details=self.details, duration_s=0.1)


def test_skipped_becomes_a_named_completed_state_and_a_run_stays_the_output():
    out = StageOutput(stage="infra", status="skipped", key="k", fingerprint="f", uris={})
    state = skipped_state(out)
    assert state.name == "Skipped" and state.is_completed()
    ran = out.model_copy(update={"status": "ran"})
    assert skipped_state(ran) is ran


def test_gs_uris_link_to_the_console_and_local_paths_stay_paths():
    assert console_url("gs://b/a/ckpt/") == "https://console.cloud.google.com/storage/browser/b/a/ckpt"
    assert console_url("/home/u/.tpurl/hf") is None
    text = output_markdown("hf_export", "/home/u/.tpurl/hf", "local runs")
    assert "`/home/u/.tpurl/hf`" in text and "file://" not in text


def _artifacts(flow_run_id) -> dict[str, Any]:
    with get_client(sync_client=True) as client:
        found = client.read_artifacts(artifact_filter=ArtifactFilter(
            flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id])))
    # the outputs list is the run's own (unkeyed): found by its description
    return {a.key or ("outputs" if (a.description or "").startswith(OUTPUTS_TITLE) else ""): a
            for a in found}


def _table(artifact) -> list[dict[str, Any]]:
    data = artifact.data
    return json.loads(data) if isinstance(data, str) else data


def test_the_page_fills_as_stages_end(prefect_api: None, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch):
    gate = threading.Event()
    hf = str(tmp_path / "hf-export")
    stages = {
        "image": GatedStage("image", "skipped", {"image": "rehearsal-venv:x"}),
        "infra": GatedStage("infra", "skipped", {"dataset": str(tmp_path / "d.parquet")}),
        "convert": GatedStage("convert", "ran", {"maxtext_checkpoint": CHECKPOINT}),
        "train": GatedStage("train", "ran", {"actor_checkpoint": CHECKPOINT + "-actor"}, gate,
                            {"metrics": {"steps": []}}),
        "export": GatedStage("export", "ran", {"hf_export": hf})}
    monkeypatch.setattr(pipeline, "STAGE_BY_NAME", stages)
    done: dict[str, Any] = {}
    runner = threading.Thread(target=lambda: done.update(state=pipeline.rl_post_training(
        profile="rehearsal", overrides={"local.root": str(tmp_path / "root"), **FIVE_STAGES},
        return_state=True)))
    RUNS.clear()
    runner.start()
    try:
        run_id = wait_until(lambda: RUNS[0] if RUNS else None, 120, "the flow run")

        def mid_run() -> dict[str, Any] | None:
            found = _artifacts(run_id)
            table = found.get("tpurl-rehearsal-stages")
            if table is None or [r["status"] for r in _table(table)][3] != "running":
                return None
            return found

        found = wait_until(mid_run, 120, "the stage table to show train running")
        statuses = [(r["stage"], r["status"]) for r in _table(found["tpurl-rehearsal-stages"])]
        assert statuses == [("image", "skipped"), ("infra", "skipped"), ("convert", "ran"),
                            ("train", "running"), ("export", "pending")]
        # the checkpoint's link is the run's own (unkeyed: only the export's is "latest");
        # Prefect 3.9.1 stores a link artifact as markdown (prefect/artifacts.py, LinkArtifact)
        with get_client(sync_client=True) as client:
            every = client.read_artifacts(artifact_filter=ArtifactFilter(
                flow_run_id=ArtifactFilterFlowRunId(any_=[run_id])))
        links = [a for a in every if a.data == f"[{CHECKPOINT}]({console_url(CHECKPOINT)})"]
        assert len(links) == 1 and links[0].key is None, links
        assert not [k for k in found if "maxtext-checkpoint" in k]
        assert "tpurl-rehearsal-local-runs-hf-export" not in found
        listed = str(found["outputs"].data)  # every URI in full, so far
        assert f"[{CHECKPOINT}]({console_url(CHECKPOINT)})" in listed and "**train**" not in listed
    finally:
        gate.set()
        runner.join(180)
    assert done["state"].is_completed(), done["state"]
    found = _artifacts(run_id)
    assert [r["status"] for r in _table(found["tpurl-rehearsal-stages"])] == \
        ["skipped", "skipped", "ran", "ran", "ran"]
    listed = str(found["outputs"].data)
    assert f"- hf_export: `{hf}`" in listed and "**train** (ran)" in listed
    export = found["tpurl-rehearsal-local-runs-hf-export"]
    assert f"`{hf}`" in str(export.data) and "](" not in str(export.data)
    with get_client(sync_client=True) as client:
        tasks = client.read_task_runs(flow_run_filter=FlowRunFilter(id={"any_": [run_id]}))
    names = {t.name.split(":")[0]: t.state.name for t in tasks}
    assert names == {"image": "Skipped", "infra": "Skipped", "convert": "Completed",
                     "train": "Completed", "export": "Completed"}, names
    # The graph colours by state type only, so its labels (the task run names) say "skipped"
    graph = client_graph(run_id)
    labels = {n["label"].split(":")[0]: (n["label"], n["state_type"]) for _, n in graph["nodes"]}
    assert labels["image"] == ("image: build patched post-training image [skipped]", "COMPLETED")
    # the rehearsal's infra names what it does there; every run's name is its title alone
    # (no hash suffix on the ones that ran, so skipped and run names read alike)
    assert labels["infra"][0] == "infra: output root, tiny model and dataset [skipped]"
    assert {s: labels[s][0] for s in ("convert", "train", "export")} == {
        s: pipeline.task_title(s, "local") for s in ("convert", "train", "export")}


def test_the_uis_run_graph_colours_by_state_type_only():
    """Why skips are named, not coloured: the UI shipped in Prefect's package fills a graph
    node by its state type (no name reaches the graph). If this changes, the rename could go."""
    import prefect

    assets = Path(prefect.__file__).parent / "server" / "ui" / "assets"
    bundles = [p.read_text() for p in assets.glob("index-*.js")]
    graph = next(b for b in bundles if "getFlowRunsGraph" in b)
    assert "node:e=>({background:h[e.state_type]})" in graph
    assert "COMPLETED:`#219D4B`" in graph
    # the new UI (served under /v2) too: prefect/server/ui-v2/assets/flow-run-graph-*.js
    v2 = "".join(p.read_text() for p in (assets.parent.parent / "ui-v2" / "assets").glob(
        "flow-run-graph-*.js"))
    assert "node:t=>({background:C(t.state_type," in v2


def client_graph(run_id) -> dict[str, Any]:
    """The run graph as the UI reads it (GET /flow_runs/{id}/graph-v2)."""
    with get_client(sync_client=True) as client:
        response = client.request("GET", "/flow_runs/{id}/graph-v2", path_params={"id": run_id})
    return response.json()


def test_a_stuck_stage_ends_at_its_timeout_and_the_table_says_so(
        prefect_api: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    never = threading.Event()  # train hangs, as a program that neither ends nor fails
    stages = {name: GatedStage(name, "skipped", {}) for name in ("image", "infra", "convert")}
    stages |= {"train": GatedStage("train", "ran", {}, never),
               "export": GatedStage("export", "ran", {"hf_export": str(tmp_path)})}
    monkeypatch.setattr(pipeline, "STAGE_BY_NAME", stages)
    monkeypatch.setattr(LocalBackend, "stage_timeout_s", lambda self, stage: 3.0)
    try:
        state = pipeline.rl_post_training(profile="rehearsal", overrides={
            "local.root": str(tmp_path / "root"), **FIVE_STAGES}, return_state=True)
    finally:
        never.set()
    assert state.is_failed(), state
    with pytest.raises(TimeoutError):
        state.result()
    found = _artifacts(state.state_details.flow_run_id)
    assert [r["status"] for r in _table(found["tpurl-rehearsal-stages"])] == \
        ["skipped", "skipped", "skipped", "timedout", "not run"]



def test_a_cancelled_run_logs_what_was_kept_and_how_to_resume(prefect_api: None, tmp_path: Path):
    """SIGTERM, as the process worker sends on a cancel from the UI, to a real flow process."""
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.settings import PREFECT_API_URL

    from tests.support.stop_probe import CHECKPOINT as KEPT

    env = {**os.environ, "PREFECT_API_URL": str(PREFECT_API_URL.value())}
    probe = subprocess.Popen([sys.executable, "-m", "tests.support.stop_probe",
                              str(tmp_path / "root")], cwd=REPO_ROOT, env=env, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        assert probe.stdout is not None
        run_id = next(line.split()[1] for line in probe.stdout if line.startswith("TRAINING"))
        probe.send_signal(signal.SIGTERM)
        out = probe.communicate(timeout=300)[0]
    finally:
        probe.kill()

    def stop_lines() -> list[str]:  # logs reach the API asynchronously
        with get_client(sync_client=True) as client:
            return [e.message for e in client.read_logs(log_filter=LogFilter(
                flow_run_id=LogFilterFlowRunId(any_=[run_id])))
                if e.message.startswith("run stopped during train")]

    said = wait_until(stop_lines, 120, f"the stop explanation in the run's log ({out[-2000:]})")
    assert f"convert (maxtext_checkpoint={KEPT})" in said[0]
    assert "checkpoints so far are kept" in said[0] and "`tpurl run rehearsal`" in said[0]
    table = _table(_artifacts(run_id)["tpurl-rehearsal-stages"])
    assert [r["status"] for r in table] == ["skipped", "skipped", "ran", "cancelled", "not run"]


class FailingStage(GatedStage):
    def execute(self, ctx, upstream) -> StageOutput:
        raise RuntimeError("evaluation broke")


def test_the_export_is_announced_when_it_ends_not_after_evaluation(
        prefect_api: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """`tpurl.model.exported` comes as the export stage ends: a run whose evaluation then
    fails has already announced its export (not only at the run's very end)."""
    from prefect.client.orchestration import get_client as client_of
    from prefect.events.filters import EventFilter, EventNameFilter, EventRelatedFilter
    from prefect.events.worker import EventsWorker

    hf = str(tmp_path / "hf-export")
    stages = {name: GatedStage(name, "skipped", {}) for name in ("image", "infra")}
    stages |= {"convert": GatedStage("convert", "ran", {"maxtext_checkpoint": CHECKPOINT}),
               "train": GatedStage("train", "ran", {"actor_checkpoint": CHECKPOINT + "-a"}),
               "export": GatedStage("export", "ran", {"hf_export": hf}),
               "evaluate": FailingStage("evaluate", "ran", {})}
    monkeypatch.setattr(pipeline, "STAGE_BY_NAME", stages)
    state = pipeline.rl_post_training(profile="rehearsal", overrides={
        "local.root": str(tmp_path / "root")}, return_state=True)
    assert state.is_failed(), state
    EventsWorker.drain_all(timeout=10)
    run_id = str(state.state_details.flow_run_id)

    def exported() -> list[Any]:
        with client_of(sync_client=True) as client:
            page = client.read_events(filter=EventFilter(
                event=EventNameFilter(name=["tpurl.model.exported"]),
                related=EventRelatedFilter(resources_in_roles=[
                    (f"prefect.flow-run.{run_id}", "flow-run")])), limit=10)
        return list(page.events)

    [event] = wait_until(exported, 60, "the tpurl.model.exported event")
    assert event.payload["hf_export"] == hf


def test_the_infra_task_is_named_for_what_its_backend_does():
    assert pipeline.task_title("infra", "local") == "infra: output root, tiny model and dataset"
    assert pipeline.task_title("infra", "gke") == "infra: provision cluster, bucket and inputs"
    assert pipeline.task_title("train", "local") == pipeline.task_title("train", "gke")


def test_a_watch_runs_page_shows_the_verdict_and_the_champions_responses(
        prefect_api: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The watch flow on a real API: its page carries one markdown artifact with the verdict
    and the champion's responses next to their prompts and rewards, a response's markup
    shown as text, then the serving canary's verdict and the served model's responses. The
    evaluation program stands in as a scorer writing both score files (it runs in the
    rehearsal's end to end)."""
    from flows.config import load_profile
    from flows.core.eval_programs import score_key
    from flows.core.scores import ScoredResponse, ScoresFile
    from flows.operations import watch_flow as watch_flow_module
    from tests.support.promoted import judge

    profile_file = tmp_path / "rehearsal-paged.yaml"
    profile_file.write_text(f"extends: rehearsal\nlocal:\n  root: {tmp_path / 'root'}\n"
                            "watch:\n  canary:\n    endpoint: http://vllm.serving.svc:8000\n"
                            "    model: served\n")
    profile = load_profile(str(profile_file))
    assert judge(profile, tmp_path, "run-a", 0.7, score_key(profile))

    class Scorer:
        def __init__(self, **_: Any) -> None:
            pass

        def __call__(self, _scoring: Any, _champion: Any, out: str) -> ScoresFile:
            from flows.core.canary import CANARY_FILE
            from flows.core.storage import LocalStorage, join

            served = ScoresFile(checkpoint="served", total=16, correct=0, format_correct=16,
                                mean_reward=0.1, rewards=[0.0, 0.2] * 8,
                                responses=[ScoredResponse(question="What is 2+2?",
                                                          response="<i>four</i>", reward=0.0)])
            LocalStorage().write_text(join(out, CANARY_FILE), served.model_dump_json())
            return ScoresFile(checkpoint="c", total=64, correct=0, format_correct=64,
                              mean_reward=0.2, rewards=[0.1, 0.3] * 32,
                              responses=[ScoredResponse(question="What is 2+2?",
                                                        response="[five](https://x) <b>5</b>",
                                                        reward=0.1)])

    monkeypatch.setattr(watch_flow_module, "ProgramScorer", Scorer)
    state = watch_flow_module.watch_flow(profile=str(profile_file), return_state=True)
    lines = state.result()
    assert lines[0].endswith(": regressed"), lines
    with get_client(sync_client=True) as client:
        [page] = client.read_artifacts(artifact_filter=ArtifactFilter(
            flow_run_id=ArtifactFilterFlowRunId(any_=[state.state_details.flow_run_id])))
    assert page.type == "markdown" and "**regressed**" in str(page.data)
    assert "## Sample outputs of the champion" in str(page.data)
    assert "| What is 2\\+2? | \\[five\\]\\(https\\://x\\) &lt;b&gt;5&lt;/b&gt; | 0.1 |" in str(
        page.data)
    assert any(line.startswith("canary 1 of served served at http://vllm.serving.svc:8000")
               and line.endswith(": regressed") for line in lines), lines
    assert "## Serving canary: **regressed**" in str(page.data)
    assert "| What is 2\\+2? | &lt;i&gt;four&lt;/i&gt; | 0 |" in str(page.data)
