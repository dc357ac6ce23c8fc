"""A GKE profile's recipe as the cluster gets it (flows/core/recipe_files.py,
flows/backends/gke/jobs/program_files.py): its files in the workload's immutable ConfigMap,
mounted read-only in the container that runs train_rl (the Pathways head's program, not the
proxy's, the resource manager's or the TPU workers'), the arguments and the guard's
environment pointing there, every object valid against Kubernetes 1.33 and the JobSet CRD;
a file edited after the plan refused at submit, one too large refused at validation, and
the plan saying where each file goes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from flows.backends.gke.jobs.manifests import render_all, stage_run
from flows.backends.gke.jobs.pathways import HEAD, WORKER
from flows.backends.gke.jobs.program_files import PROGRAMS_DIR, VOLUME, program_files_configmap
from flows.backends.gke.jobs.render import render_jobset
from flows.common.paths import EVAL_PROGRAM, REWARD_GUARD
from flows.config import Profile, ProfileError
from flows.config.recipe_limits import CONFIGMAP_MAX_BYTES
from flows.core.failures import FailureCategory, StageFailed
from flows.core.layout import Layout
from flows.core.programs import train_workload
from flows.operations.plan import build_plan, planned_workloads, render_text
from tests.fakes.gke_backend import ListLogger, jobsets_created, make_backend
from tests.fakes.kube_api import FakeApiServer, FakeKube
from tests.fakes.kube_api.scenarios import admit, scenario, start, succeed
from tests.support.jobset_schema import KUBERNETES_VERSION, jobset_errors
from tests.support.profiles import fake_hf_token, tutorial_profile

REWARDS = "def a(**kw):\n    return [0.0]\n\n\ndef b(**kw):\n    return [1.0]\n"
PROCESSOR = "def process_data(*args):\n    return args\n"
TEMPLATE = '{"SYSTEM_PROMPT": "s", "TEMPLATE": "{question}"}\n'
RECIPE_ARGS = (f"reward_functions_path={PROGRAMS_DIR}/reward_guard.py", "reward_functions=a,b",
               f"dataset_processor_path={PROGRAMS_DIR}/recipe_processor.py",
               f"data_template_path={PROGRAMS_DIR}/recipe_template.json")
RECIPE_KEYS = {"reward_guard.py", "recipe_rewards.py", "recipe_processor.py",
               "recipe_template.json"}


@pytest.fixture
def recipe_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "team"
    folder.mkdir()
    (folder / "rewards.py").write_text(REWARDS)
    (folder / "process.py").write_text(PROCESSOR)
    (folder / "template.json").write_text(TEMPLATE)
    return folder


def _full(folder: Path) -> dict[str, str]:
    return {"recipe.rewards.file": str(folder / "rewards.py"), "recipe.rewards.functions": "a,b",
            "recipe.dataset_processor": str(folder / "process.py"),
            "recipe.chat_template": str(folder / "template.json")}


def _profile(folder: Path, **more: str) -> Profile:
    return tutorial_profile(**{"eval.batches": "2", **_full(folder), **more})


def _containers(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in [*pod.get("initContainers", []), *pod["containers"]]}


def _pods(jobset: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {rj["name"]: rj["template"]["spec"]["template"]["spec"]
            for rj in jobset["spec"]["replicatedJobs"]}


def test_the_recipe_is_mounted_where_train_rl_runs_and_named_by_its_arguments(
        recipe_dir: Path) -> None:
    profile = _profile(recipe_dir)
    workloads = planned_workloads(profile)
    objects = render_all(profile, workloads)
    configmaps = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ConfigMap"}
    jobsets = {o["metadata"]["labels"]["tpurl/stage"]: o for o in objects
               if o["kind"] == "JobSet"}
    expected = {"train": RECIPE_KEYS, "evaluate-base": {*RECIPE_KEYS, "evaluate_rl.py"},
                "evaluate-trained": {*RECIPE_KEYS, "evaluate_rl.py"}}
    for job, keys in expected.items():
        jobset = jobsets[job]
        head, worker = _pods(jobset)[HEAD], _pods(jobset)[WORKER]
        (volume,) = head["volumes"]
        assert volume["name"] == VOLUME
        configmap = configmaps[volume["configMap"]["name"]]
        assert configmap["immutable"] is True and set(configmap["data"]) == keys, job
        assert configmap["data"]["recipe_rewards.py"] == REWARDS
        assert configmap["data"]["recipe_processor.py"] == PROCESSOR
        assert configmap["data"]["recipe_template.json"] == TEMPLATE
        assert configmap["data"]["reward_guard.py"] == REWARD_GUARD.read_text()
        if "evaluate_rl.py" in keys:
            assert configmap["data"]["evaluate_rl.py"] == EVAL_PROGRAM.read_text()
        containers = _containers(head)
        program = containers["workload-container"]  # the one that runs train_rl
        assert program["volumeMounts"] == [{"name": VOLUME, "mountPath": PROGRAMS_DIR,
                                            "readOnly": True}]
        # the sidecars and the TPU workers run no program of ours: they mount nothing
        assert all("volumeMounts" not in c for name, c in containers.items()
                   if name != "workload-container")
        assert "volumes" not in worker
        script = program["command"][-1]
        for arg in RECIPE_ARGS:
            assert f" {arg}" in script, (job, arg)
        env = {e["name"]: e.get("value") for e in program["env"]}
        assert env["REWARD_GUARD_FILE"] == f"{PROGRAMS_DIR}/recipe_rewards.py"
        assert env["REWARD_GUARD_FUNCTIONS"] == "a,b"
    # the team's own paths never reach the pod
    for jobset in jobsets.values():
        assert str(recipe_dir) not in str(jobset)


def test_every_object_of_a_recipe_passes_strict_validation(recipe_dir: Path) -> None:
    profile = _profile(recipe_dir)
    for obj in render_all(profile, planned_workloads(profile)):
        if obj["kind"] == "JobSet":
            assert jobset_errors(obj) == [], obj["metadata"]["name"]
            for rj in obj["spec"]["replicatedJobs"]:
                job = {"apiVersion": "batch/v1", "kind": "Job",
                       "metadata": {"name": f"{obj['metadata']['name']}-{rj['name']}-0"},
                       "spec": rj["template"]["spec"]}
                kubernetes_validate.validate(job, KUBERNETES_VERSION, strict=True)
        else:
            kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize(("only", "keys"), [
    ({"recipe.rewards.file": "rewards.py", "recipe.rewards.functions": "a"},
     {"reward_guard.py", "recipe_rewards.py"}),
    ({"recipe.dataset_processor": "process.py"}, {"recipe_processor.py"}),
    ({"recipe.chat_template": "template.json"},
     {"recipe_template.json"}),
])
def test_only_the_files_the_recipe_names_are_shipped(recipe_dir: Path, only: dict[str, str],
                                                     keys: set[str]) -> None:
    given = {k: str(recipe_dir / v) if k.startswith("recipe.") and "." in v else v
             for k, v in only.items()}
    profile = tutorial_profile(**given)
    train = planned_workloads(profile)["train"]
    assert {f.name for f in train.files} == keys
    (configmap,) = [o for o in render_all(profile, {"train": train}) if o["kind"] == "ConfigMap"]
    assert set(configmap["data"]) == keys
    argv = " ".join(train.argv)
    assert ("reward_functions_path" in argv) == ("recipe_rewards.py" in keys)
    assert ("REWARD_GUARD_FILE" in dict(train.env)) == ("recipe_rewards.py" in keys)


def test_without_a_recipe_training_ships_nothing() -> None:
    train = planned_workloads(tutorial_profile())["train"]
    assert train.files == ()
    assert "volumes" not in _pods(render_jobset(train, tutorial_profile(), run="r",
                                                stage="train"))[HEAD]


def test_a_recipe_file_edited_after_the_plan_is_refused_naming_it(recipe_dir: Path) -> None:
    profile = _profile(recipe_dir)
    train = planned_workloads(profile)["train"]
    (recipe_dir / "rewards.py").write_text(REWARDS + "# tuned\n")
    with pytest.raises(ValueError, match="changed while the run was planned") as refused:
        program_files_configmap(train.files, "ns")
    assert str(recipe_dir / "rewards.py") in str(refused.value)
    (recipe_dir / "rewards.py").unlink()
    with pytest.raises(ValueError, match="cannot be read") as gone:
        program_files_configmap(train.files, "ns")
    assert str(recipe_dir / "rewards.py") in str(gone.value)


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeApiServer]:
    monkeypatch.setenv("HF_TOKEN", fake_hf_token("CANARYrecipe"))
    with FakeApiServer(FakeKube()) as srv:
        yield srv


def test_the_cluster_gets_the_recipe_and_an_edit_before_submit_submits_nothing(
        server: FakeApiServer, recipe_dir: Path, tmp_path: Path) -> None:
    """Against the fake API: the train JobSet's ConfigMap carries the team's bytes; a file
    edited between the plan and the submission stops it before any JobSet exists."""
    kube = scenario(server.kube, [(0.1, admit), (0.05, start), (0.1, succeed)])
    profile = _profile(recipe_dir)
    logger = ListLogger()
    backend = make_backend(server.url, "train", tmp_path, logger, profile=profile)
    workload = train_workload(profile, Layout(profile), backend.runtime)
    backend.run_workload(workload, (tmp_path / "train.log").as_uri())
    (configmap,) = kube.find("configmaps")
    assert set(configmap["data"]) == RECIPE_KEYS
    assert configmap["data"]["recipe_rewards.py"] == REWARDS
    assert jobsets_created(kube) == 1
    (jobset,) = kube.find("jobsets")
    assert jobset["metadata"]["labels"]["tpurl/run"] == stage_run(profile, "train")

    edited = FakeApiServer(FakeKube())
    with edited as other:
        backend = make_backend(other.url, "train", tmp_path, logger, profile=profile)
        (recipe_dir / "process.py").write_text(PROCESSOR + "# another split\n")
        with pytest.raises(StageFailed) as refused:
            backend.run_workload(workload, (tmp_path / "train2.log").as_uri())
        diagnosis = refused.value.diagnosis
        assert diagnosis.category is FailureCategory.USER_ERROR  # never retried as ours
        assert diagnosis.code == "gke/shipped-file-changed"
        assert str(recipe_dir / "process.py") in diagnosis.detail
        assert "changed while the run was planned" in diagnosis.detail
        assert "nothing was submitted" in diagnosis.fix
        assert jobsets_created(other.kube) == 0 and other.kube.find("configmaps") == []


def test_a_recipe_too_large_for_its_configmap_is_refused_when_the_profile_is_read(
        recipe_dir: Path) -> None:
    big = recipe_dir / "rewards.py"
    big.write_text(REWARDS + "#" * CONFIGMAP_MAX_BYTES + "\n")
    with pytest.raises(ProfileError) as refused:
        _profile(recipe_dir)
    (issue,) = refused.value.issues
    assert issue.field == "recipe.rewards.file"
    assert str(big) in issue.problem and f"{big.stat().st_size:,} bytes" in issue.problem
    assert "1 MiB" in issue.problem and "keep the recipe's files under" in issue.fix
    # together too large, though each alone would fit: the largest is named, with the rest
    big.write_text(REWARDS)
    half = "#" * (CONFIGMAP_MAX_BYTES // 2) + "\n"
    (recipe_dir / "process.py").write_text(PROCESSOR + half)
    (recipe_dir / "template.json").write_text(TEMPLATE.rstrip() + " " * len(half) + "\n")
    with pytest.raises(ProfileError) as together:
        _profile(recipe_dir)
    (issue,) = together.value.issues
    assert issue.field == "recipe.chat_template" and "recipe.dataset_processor" in issue.problem


def test_a_recipe_file_that_is_not_text_is_refused_when_the_profile_is_read(
        recipe_dir: Path) -> None:
    (recipe_dir / "process.py").write_bytes(b"x = '\xff'\n")
    with pytest.raises(ProfileError) as refused:
        _profile(recipe_dir)
    (issue,) = refused.value.issues
    assert issue.field == "recipe.dataset_processor" and "not UTF-8" in issue.problem


def test_the_plan_says_where_each_recipe_file_goes(recipe_dir: Path) -> None:
    profile = _profile(recipe_dir)
    text = render_text(profile, build_plan(profile))
    notes = [line for line in text.splitlines() if "the recipe ships with" in line]
    assert len(notes) == 2  # training's, and the evaluation's
    for note in notes:
        assert f"mounted read-only at {PROGRAMS_DIR}" in note
        for field, name, shipped in (("recipe.rewards.file", "rewards.py", "recipe_rewards.py"),
                                     ("recipe.dataset_processor", "process.py",
                                      "recipe_processor.py"),
                                     ("recipe.chat_template", "template.json",
                                      "recipe_template.json")):
            assert f"{field} {recipe_dir / name} → {PROGRAMS_DIR}/{shipped}" in note
        assert f"reward_functions_path → {PROGRAMS_DIR}/reward_guard.py" in note
    assert "the recipe ships" not in render_text(tutorial_profile(),
                                                 build_plan(tutorial_profile()))
