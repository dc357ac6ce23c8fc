"""Rendered JobSets: valid against the real JobSet v0.10.1 CRD and Kubernetes' own schemas,
and carrying what the tutorial's jobs need (env, images, placement, slices)."""

from __future__ import annotations

import copy
import hashlib
import shlex
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from flows.backends.gke.jobs.manifests import render_all, stage_run
from flows.backends.gke.jobs.render import render_jobset
from flows.config import Profile, ProfileError
from flows.operations.plan import planned_workloads
from tests.support.jobset_schema import KUBERNETES_VERSION, jobset_errors
from tests.support.profiles import tutorial_profile

PATHWAYS_CONTAINERS = ("pathways-proxy", "pathways-rm", "pathways-worker", "workload-container")


def _jobsets(profile: Profile) -> dict[str, dict[str, Any]]:
    return {stage: render_jobset(w, profile, run=stage_run(profile, stage), stage=stage)
            for stage, w in planned_workloads(profile).items()}


def _pods(jobset: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {rj["name"]: rj["template"]["spec"]["template"]["spec"]
            for rj in jobset["spec"]["replicatedJobs"]}


def _containers(jobset: dict[str, Any]) -> dict[str, dict[str, Any]]:
    found = {}
    for pod in _pods(jobset).values():
        for c in [*pod.get("initContainers", []), *pod["containers"]]:
            found[c["name"]] = c
    return found


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


VARIANTS = [
    ("tutorial", {}),
    ("two-slices", {"gke.num_slices": "2"}),
    ("4x4", {"gke.topology": "4x4", "model.maxtext_name": "qwen3-8b",  # 30B fits no 4x4
             "model.hf_repo": "Qwen/Qwen3-8B"}),
    ("8x8-tpu-hosts", {"gke.topology": "8x8", "gke.conversion_placement": "tpu-hosts"}),
    ("evaluating", {"eval.batches": "2"}),
    ("evaluating-two-slices-spot", {"eval.batches": "2", "gke.num_slices": "2",
                                    "gke.capacity": "spot", "gke.reservation": "",
                                    "gke.prices.spot.usd_per_chip_hour": "1.0",
                                    "gke.prices.spot.source": "a quote",
                                    "gke.prices.spot.as_of": "2026-12-01"}),
]


@pytest.mark.parametrize(("label", "overrides"), VARIANTS, ids=[v[0] for v in VARIANTS])
def test_every_object_validates(label: str, overrides: dict[str, str]):
    profile = tutorial_profile(**overrides)
    for stage, jobset in _jobsets(profile).items():
        assert jobset_errors(jobset) == [], (label, stage)
        for rj in jobset["spec"]["replicatedJobs"]:
            job = {"apiVersion": "batch/v1", "kind": "Job",
                   "metadata": {"name": f"{jobset['metadata']['name']}-{rj['name']}-0"},
                   "spec": rj["template"]["spec"]}
            kubernetes_validate.validate(job, KUBERNETES_VERSION, strict=True)
    for obj in render_all(profile, planned_workloads(profile)):
        if obj["kind"] in ("Secret", "ConfigMap"):
            kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


def test_the_evaluation_runs_where_training_runs_with_its_program_mounted() -> None:
    """Two JobSets (base, trained), each a Pathways job like training's, named by their own
    score keys, running the program from the one ConfigMap the plan also writes."""
    from flows.backends.gke.jobs.program_files import PROGRAMS_DIR
    from flows.core.eval_programs import EVAL_PROGRAM

    profile = tutorial_profile(**{"eval.batches": "2"})
    jobsets = _jobsets(profile)
    assert list(jobsets) == ["convert", "train", "export", "evaluate-base", "evaluate-trained"]
    objects = render_all(profile, planned_workloads(profile))
    (configmap,) = [o for o in objects if o["kind"] == "ConfigMap"]
    assert configmap["immutable"] is True
    assert configmap["data"] == {"evaluate_rl.py": EVAL_PROGRAM.read_text()}
    train = jobsets["train"]
    for job in ("evaluate-base", "evaluate-trained"):
        jobset = jobsets[job]
        assert jobset["metadata"]["labels"]["tpurl/stage"] == job
        assert jobset["metadata"]["labels"]["tpurl/run"] == stage_run(profile, job)
        assert len(jobset["metadata"]["name"]) <= 28
        assert [rj["name"] for rj in jobset["spec"]["replicatedJobs"]] == \
            [rj["name"] for rj in train["spec"]["replicatedJobs"]]
        assert _pods(jobset)["worker"] == _pods(train)["worker"]  # the same slice
        head = _pods(jobset)["pathways-head"]
        assert head["volumes"] == [{"name": "tpurl-programs",
                                    "configMap": {"name": configmap["metadata"]["name"]}}]
        program = _containers(jobset)["workload-container"]
        assert program["volumeMounts"] == [{"name": "tpurl-programs", "mountPath": PROGRAMS_DIR,
                                            "readOnly": True}]
        script = program["command"][-1]
        assert f"exec python3 {PROGRAMS_DIR}/evaluate_rl.py --out gs://" in script
        assert _env(program)["JAX_PLATFORMS"] == _env(_containers(train)["workload-container"])[
            "JAX_PLATFORMS"]
    assert stage_run(profile, "evaluate-base") != stage_run(profile, "evaluate-trained")
    # the jobs without a shipped program mount nothing
    assert "volumes" not in _pods(train)["pathways-head"]


def test_a_changed_program_ships_under_a_new_name_and_a_stale_one_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from flows.backends.gke.jobs import program_files
    from flows.core.workload import ProgramFile

    (tmp_path / "p.py").write_text("print(1)\n")
    one = ProgramFile("p.py", "p.py", hashlib.sha256(b"print(1)\n").hexdigest()[:16])
    two = ProgramFile("p.py", "p.py", hashlib.sha256(b"print(2)\n").hexdigest()[:16])
    monkeypatch.setattr(program_files, "REPO_ROOT", tmp_path)
    assert program_files.configmap_name((one,)) != program_files.configmap_name((two,))
    assert program_files.program_files_configmap((one,), "ns")["data"] == {"p.py": "print(1)\n"}
    with pytest.raises(ValueError, match="changed while the run was planned"):
        program_files.program_files_configmap((two,), "ns")
    (tmp_path / "p.py").write_text("x" * (program_files.MAX_BYTES + 1))
    big = ProgramFile("p.py", "p.py", hashlib.sha256(b"x" * (program_files.MAX_BYTES + 1))
                      .hexdigest()[:16])
    with pytest.raises(ValueError, match="over a ConfigMap's"):
        program_files.program_files_configmap((big,), "ns")


def test_strict_schema_catches_unknown_and_mistyped_fields(profile: Profile):
    jobset = _jobsets(profile)["train"]
    typo = copy.deepcopy(jobset)
    typo["spec"]["ttlSecondsAfterFinish"] = 5
    wrong = copy.deepcopy(jobset)
    wrong["spec"]["replicatedJobs"][1]["replicas"] = "1"
    newer = copy.deepcopy(jobset)  # a v0.12 field the installed v0.10.1 does not know
    newer["spec"]["volumeClaimPolicies"] = []
    for bad in (typo, wrong, newer):
        assert jobset_errors(bad)


def test_conversion_defaults_to_one_cpu_pod_without_tpu(profile: Profile):
    for stage in ("convert", "export"):
        jobset = _jobsets(profile)[stage]
        (rj,) = jobset["spec"]["replicatedJobs"]
        assert (rj["replicas"], rj["template"]["spec"]["parallelism"]) == (1, 1)
        pod = rj["template"]["spec"]["template"]["spec"]
        assert pod["nodeSelector"] == {"cloud.google.com/gke-nodepool": "cpu-np"}
        assert "google.com/tpu" not in str(jobset)
        resources = pod["containers"][0]["resources"]
        assert resources["requests"] == resources["limits"]  # Guaranteed QoS
        # sized for one cpu-np node (n4-standard-64, 100 GB boot disk): the HF cache lives on
        # a memory-backed scratch volume, counted in the memory limit
        assert resources["limits"]["memory"] == "192Gi"
        assert resources["limits"]["ephemeral-storage"] == "16Gi"
        assert pod["volumes"][0]["emptyDir"] == {"medium": "Memory", "sizeLimit": "64Gi"}
        assert _env(pod["containers"][0])["HF_HOME"].startswith("/scratch/")
        assert "alpha.jobset.sigs.k8s.io/exclusive-topology" not in jobset["metadata"]["annotations"]


def test_tutorial_placement_is_a_profile_field():
    jobset = _jobsets(tutorial_profile(**{"gke.conversion_placement": "tpu-hosts"}))["convert"]
    (rj,) = jobset["spec"]["replicatedJobs"]
    assert rj["template"]["spec"]["parallelism"] == 8
    container = rj["template"]["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"] == {"google.com/tpu": "4"}
    assert '"${JOB_COMPLETION_INDEX:-0}" != "0"' in container["command"][2]


def test_pathways_jobset_shape_and_env(profile: Profile):
    jobset = _jobsets(profile)["train"]
    spec = jobset["spec"]
    assert spec["coordinator"] == {"replicatedJob": "pathways-head"}
    assert spec["failurePolicy"]["maxRestarts"] == 0
    assert spec["ttlSecondsAfterFinished"] == 86400
    pods = _pods(jobset)
    assert pods["pathways-head"]["nodeSelector"] == {  # in the reservation's zone, as its slice
        "cloud.google.com/gke-nodepool": "cpu-np", "topology.kubernetes.io/zone": "us-east5-b"}
    assert all(c["restartPolicy"] == "Always" for c in pods["pathways-head"]["initContainers"])
    containers = _containers(jobset)
    assert set(containers) == set(PATHWAYS_CONTAINERS)
    for name in PATHWAYS_CONTAINERS:
        env = _env(containers[name])
        assert env["GRPC_DNS_RESOLVER"] == "native", name
        assert env["FLAGS_pathways_enforce_subset_devices_form_subslice"] == "false", name
        names = [e["name"] for e in containers[name]["env"]]
        assert len(names) == len(set(names)), name
        assert ":latest" not in containers[name]["image"] and ":" in containers[name]["image"]
    program = _env(containers["workload-container"])
    assert program["JAX_PLATFORMS"] == "proxy,cpu"
    assert program["ENABLE_PATHWAYS_PERSISTENCE"] == "1"
    # maxtext-v0.2.4 trainers/post_train/rl/scripts/run_qwen3_30b_rl.sh:85 sets it
    assert program["SKIP_JAX_PRECOMPILE"] == "1"
    assert program["JAX_BACKEND_TARGET"] == "grpc://127.0.0.1:29000"
    assert program["HF_TOKEN"]["secretKeyRef"]["key"] == "value"
    assert "--instance_type=tpuv6e:4x8" in containers["pathways-rm"]["args"]
    for c in ("pathways-proxy", "pathways-rm", "pathways-worker"):
        assert "--gcs_scratch_location=gs://my-tpurl-bucket/pathways/" in containers[c]["args"]
    assert containers["pathways-worker"]["resources"]["limits"] == {"google.com/tpu": "4"}


def test_the_profile_overrides_what_maxtexts_scripts_set() -> None:
    """gke.train_env replaces a default of the same name and adds others; a bad name is
    refused at load, naming the field."""
    jobset = _jobsets(tutorial_profile(**{"gke.train_env.SKIP_JAX_PRECOMPILE": "0",
                                          "gke.train_env.TPU_MIN_LOG_LEVEL": "0"}))["train"]
    container = _containers(jobset)["workload-container"]
    env = _env(container)
    assert env["SKIP_JAX_PRECOMPILE"] == "0" and env["TPU_MIN_LOG_LEVEL"] == "0"
    assert [e["name"] for e in container["env"]].count("SKIP_JAX_PRECOMPILE") == 1
    with pytest.raises(ProfileError) as caught:
        tutorial_profile(**{"gke.train_env.NOT-A-NAME": "1"})
    assert caught.value.issues[0].field.startswith("gke.train_env")


def test_multislice(profile: Profile):
    jobset = _jobsets(tutorial_profile(**{"gke.num_slices": "2"}))["train"]
    worker = jobset["spec"]["replicatedJobs"][1]
    assert worker["replicas"] == 2
    assert "--instance_count=2" in _containers(jobset)["pathways-rm"]["args"]
    env = _env(_containers(jobset)["pathways-worker"])
    assert "replicatedjob-replicas" in str(env["MEGASCALE_NUM_SLICES"])
    assert "job-index" in str(env["MEGASCALE_SLICE_ID"])


def test_command_holds_argv_once_and_preamble(profile: Profile):
    for stage, workload in planned_workloads(profile).items():
        container = _containers(_jobsets(profile)[stage])["workload-container"]
        command = container["command"]
        assert command[:2] == ["/bin/bash", "-c"]
        assert command[2].count(shlex.join(workload.argv)) == 1, stage
        for line in workload.preamble:
            assert line in command[2]
        assert "hf_access_token" not in command[2] and "HF_TOKEN" not in command[2]


def test_labels_queue_and_determinism(profile: Profile):
    again = tutorial_profile()
    first = render_all(profile, planned_workloads(profile))
    second = render_all(again, planned_workloads(again))
    assert first == second
    for obj in first:
        if obj["kind"] == "JobSet":
            assert obj["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "user-queue"
            assert len(obj["metadata"]["name"]) <= 28


@pytest.mark.parametrize(("chain", "order"), [
    ("on-demand", "InOrder"), ("spot,on-demand", "InOrder"), ("queued", "AnyOrder"),
    ("queued,on-demand", "AnyOrder"), ("on-demand,queued", "InOrder")])
def test_queued_capacity_starts_the_workers_with_the_head(chain: str, order: str) -> None:
    """A queued slice exists, billed, before Kueue admits the JobSet, and its booking lapses
    if no pod uses it in time: the workers start with the head (AnyOrder) so they bind at
    admission; every other mode keeps Pathways' InOrder (the head first, then the slice
    scales up). The order follows the chain's first mode, the one the JobSet is rendered for
    (capacity_run.in_mode puts the step's mode first)."""
    from tests.support.profiles import capacity_overrides

    profile = tutorial_profile(**capacity_overrides(chain))
    jobset = _jobsets(profile)["train"]
    assert jobset["spec"]["startupPolicy"] == {"startupPolicyOrder": order}
    assert not jobset_errors(jobset)


def test_kubelets_restart_delays_bound_the_restarts_in_a_wait() -> None:
    """kubelet restarts after 10, 20, 40, 80, 160 s, then every 300 s (pkg/kubelet/kubelet.go
    backOffPeriod, MaxContainerBackOff): 5 restarts by 310 s, the 6th at 610 s."""
    from flows.backends.gke.jobs.pathways import restarts_within

    assert [restarts_within(s) for s in (0, 9.9, 10, 309.9, 310, 609.9, 610, 2400)] == \
        [0, 0, 1, 4, 5, 5, 6, 11]


@pytest.mark.parametrize(("smoke", "chain", "image_pull", "limit"), [
    (False, "on-demand", None, 32), (False, "queued", None, 8 * 11 + 32),
    (True, "queued", None, 2 * 11 + 32), (True, "queued", "5", 2 * 5 + 32)])
def test_workers_started_with_the_head_may_restart_through_its_image_pull(
        smoke: bool, chain: str, image_pull: str | None, limit: int) -> None:
    """With AnyOrder every worker that gives up on a head not yet up restarts in place, and
    the Job fails once all its pods' restarts reach backoffLimit (kubernetes
    pkg/controller/job/job_controller.go pastBackoffLimitOnFailure): the limit lets each of
    the slice's hosts (8 on the tutorial's 4x8, 2 on the smoke's 2x4) restart through twice
    the head's image pull (the smoke's stated 20 min, or 5: 40 and 10 min, 11 and 5
    restarts; the tutorial states none: its 20 min guess doubled), then keeps 32 for real
    failures. InOrder workers start after the head is ready: 32."""
    from tests.support.profiles import capacity_overrides, smoke_profile

    overrides = capacity_overrides(chain)
    if image_pull is not None:
        overrides["gke.train_timeline.image_pull"] = image_pull
    profile = (smoke_profile if smoke else tutorial_profile)(**overrides)
    worker = _jobsets(profile)["train"]["spec"]["replicatedJobs"][1]
    assert worker["template"]["spec"]["backoffLimit"] == limit


@pytest.mark.parametrize(("smoke", "hosts", "wait_s", "fixed_fails"), [
    (False, 8, 2 * 20 * 60.0, True), (True, 2, 2 * 20 * 60.0, False)])
def test_the_job_controller_keeps_workers_that_restarted_through_the_head_pull(
        smoke: bool, hosts: int, wait_s: float, fixed_fails: bool) -> None:
    """Every worker of a queued slice exits at once until the head is up, through twice
    the head's image pull (the smoke states 20 min; the tutorial states none, and the guess
    is 20): the Job controller (the fake's copy of pastBackoffLimitOnFailure) keeps the
    rendered worker Job. At the fixed limit of 32 it would have failed the tutorial's 8
    workers' Job (8 x 11 restarts), not the smoke's 2 (2 x 11)."""
    from tests.fakes.kube_api.restarts import past_backoff_limit_on_failure, restarted_while_waiting
    from tests.support.profiles import capacity_overrides, smoke_profile

    profile = (smoke_profile if smoke else tutorial_profile)(**capacity_overrides("queued"))
    worker = _jobsets(profile)["train"]["spec"]["replicatedJobs"][1]["template"]
    restarts = restarted_while_waiting(wait_s)
    pods = [{"status": {"phase": "Running", "containerStatuses": [{"restartCount": restarts}]}}
            for _ in range(hosts)]
    assert worker["spec"]["parallelism"] == hosts
    assert not past_backoff_limit_on_failure(worker, pods)
    fixed = {**worker, "spec": {**worker["spec"], "backoffLimit": 32}}
    assert past_backoff_limit_on_failure(fixed, pods) == fixed_fails
