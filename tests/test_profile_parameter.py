"""A run created through the Prefect API takes its profile by name, never by path
(flows/config/loading.py ``require_profile_name``): the serving flow always, the pipeline
and the teardown in a deployment's run unless the path is the deployment's own `profile`
(the operator's, as the dispatcher's retrain runs pass it on). A path from a run's creator
would make the worker read any YAML file it can read and trust it as the operator's
profile. Proven on a real Prefect API, with each flow run
executed as a process worker executes it, and a real planted profile file at the path."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from flows.common.paths import PROFILES_DIR, REPO_ROOT
from flows.config import ProfileError, load_profile
from flows.config.loading import profile_name_problem, require_profile_name
from tests.support.worker_run import execute_as_a_worker

PATHS = ("../x.yaml", "/etc/passwd", "./foo.yaml", "profiles/rehearsal", "rehearsal.yaml",
         "..", ".hidden", "a\\b", "")


@pytest.mark.parametrize("value", PATHS)
def test_a_path_is_refused_with_the_parameter_named(value: str) -> None:
    assert profile_name_problem(value) is not None
    with pytest.raises(ProfileError) as refused:
        require_profile_name(value, "profile")
    text = str(refused.value)
    assert text.startswith("run parameter 'profile' is invalid")
    assert "- profile: " in text and "never a path" in text and "give one of: " in text


def test_shipped_names_are_taken_and_unknown_names_get_the_closest() -> None:
    for name in ("rehearsal", "smoke-qwen3-0.6b-v6e-8", "qwen3-30b-a3b-v6e-32"):
        assert require_profile_name(name) == PROFILES_DIR / f"{name}.yaml"
    with pytest.raises(ProfileError, match="did you mean 'rehearsal'"):
        require_profile_name("rehersal")
    with pytest.raises(ProfileError, match="is not a profile name"):
        require_profile_name({"path": "/etc/passwd"})


def test_a_deployment_run_refuses_a_path_an_in_process_call_takes_it(tmp_path: Path) -> None:
    """`tpurl run FILE.yaml` calls the flow in-process: its caller owns the file. A
    deployment's run does not, and a name is all it may give."""
    planted = tmp_path / "planted.yaml"  # the rehearsal's fields, named by its own file
    planted.write_text((PROFILES_DIR / "rehearsal.yaml").read_text().replace(
        "\nname: rehearsal\n", "\n"))
    relative = os.path.relpath(planted, REPO_ROOT)
    assert load_profile(str(planted), {"local.root": str(tmp_path)}, origin="flow").name
    for given in (str(planted), relative):
        with pytest.raises(ProfileError, match="never a path"):
            load_profile(given, {"local.root": str(tmp_path)}, origin="deployment")
        # another deployment's own path is no licence for this one's runs
        with pytest.raises(ProfileError, match="never a path"):
            load_profile(given, {"local.root": str(tmp_path)}, origin="deployment",
                         deployed_profile=str(tmp_path / "other.yaml"))
    # the deployment's own `profile` (prefect.yaml, the operator's) is as trusted as the file:
    # the dispatcher's retrain runs of a target deployed with a path pass it on unchanged
    root = {"local.root": str(tmp_path)}  # the deployment's own overrides, as prefect.yaml's
    assert load_profile(str(planted), root, origin="deployment", deployed=root,
                        deployed_profile=str(planted)).name


@pytest.mark.services
def test_deployment_runs_given_a_path_are_refused_before_anything_runs(
        prefect_api: None, tmp_path: Path) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    # planted profiles: each would load (or fail on its own content) if taken as a path
    rehearsal = tmp_path / "planted-rehearsal.yaml"
    rehearsal.write_text((PROFILES_DIR / "rehearsal.yaml").read_text().replace(
        "backend: local", "backend: gke"))
    smoke = tmp_path / "planted-smoke.yaml"
    smoke.write_text((PROFILES_DIR / "smoke-qwen3-0.6b-v6e-8.yaml").read_text())
    served = tmp_path / "planted-serving.yaml"
    served.write_text((PROFILES_DIR / "rehearsal.yaml").read_text())
    flows = {  # flow name: (entrypoint, parameters), each with another path form
        "rl-post-training": ("flows/pipeline.py:rl_post_training",
                             {"profile": os.path.relpath(rehearsal, REPO_ROOT)}),
        "teardown": ("flows/operations/teardown.py:teardown_flow", {"profile": str(smoke)}),
        "record-promoted-model": ("flows/serving.py:record_promoted_model",
                                  {"profile": "./" + os.path.relpath(served, REPO_ROOT),
                                   "model_uri": "file:///exports/1"}),
    }
    runs = {}
    with get_client(sync_client=True) as client:
        for name, (entrypoint, parameters) in flows.items():
            deployment_id = client.create_deployment(
                flow_id=client.create_flow_from_name(name), name=f"path-{uuid.uuid4().hex[:8]}",
                entrypoint=entrypoint, pull_steps=[{
                    "prefect.deployments.steps.set_working_directory": {
                        "directory": str(REPO_ROOT)}}])
            runs[name] = client.create_flow_run_from_deployment(
                deployment_id, parameters=parameters).id
    workers = {name: execute_as_a_worker(str(run_id)) for name, run_id in runs.items()}
    outputs = {name: worker.communicate(timeout=600)[0] for name, worker in workers.items()}
    with get_client(sync_client=True) as client:
        for name, run_id in runs.items():
            run = client.read_flow_run(run_id)
            assert run.state is not None and run.state.is_failed(), (name, outputs[name])
            message = run.state.message or ""
            if name == "record-promoted-model":  # its profile comes from the run: a name only
                assert "run parameter 'profile' is invalid" in message, (name, message)
                assert "never a path" in message and "give one of: " in message
            else:  # the pipeline's and teardown's profile is the deployment's: refused sooner
                assert "chose what only the deployment may" in message, (name, message)
                assert "a run may not choose another" in message, (name, message)
            tasks = client.read_task_runs(flow_run_filter=FlowRunFilter(
                id=FlowRunFilterId(any_=[run_id])))
            assert tasks == [], name
