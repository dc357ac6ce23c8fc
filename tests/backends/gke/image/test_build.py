"""Real builds against Debian's dockerd and registry (no fakes of Docker).

A stand-in base carrying the real upstream files (tests/fakes/image_standin.py) is built and
pushed locally; the patched image is built FROM it by flows.backends.gke.image, pushed, pulled back by
digest and read; a second run must skip; a base in which upstream moved a pattern must fail
the build naming file and pattern; a registry that is down at first must be retried.
"""

from __future__ import annotations

import io
import subprocess
import tarfile
import time
from pathlib import Path

import docker
import pytest

from flows.backends.gke.image import DockerUnavailable, ImageBuildFailed, ImageRequest, connect, ensure_image
from flows.backends.gke.image.build import ImageResult
from flows.backends.gke.image.registry_daemon import pin_base, push, remote_digest
from flows.backends.gke.image.verify import verify_image
from flows.common.paths import PATCHES_FILE
from flows.core.failures import FailureCategory
from flows.core.layout import Layout
from flows.core.patching import count_matches, load_declarations
from flows.core.retry import RetryPolicy
from flows.operations.plan import planned_workloads
from tests.fakes.image_standin import OTHER_TUNIX, SITE
from tests.support.docker import registry_config
from tests.support.net import free_port
from tests.support.profiles import tutorial_profile
from tests.support.wandb_records import history, run_record

FAST = RetryPolicy(attempts=4, base_s=0.5, factor=2.0)
PATCHES = load_declarations(PATCHES_FILE)


@pytest.fixture(scope="module")
def first_build(docker_client: docker.DockerClient, standin_base: str,
                registry_prefix: str) -> ImageResult:
    request = ImageRequest(base=standin_base, repository=f"{registry_prefix}/tpu-post-training")
    return ensure_image(request, docker_client, FAST)


def test_first_run_builds_pushes_and_returns_the_digest(first_build: ImageResult,
                                                        registry_prefix: str):
    assert first_build.built
    assert first_build.ref == f"{registry_prefix}/tpu-post-training@{first_build.digest}"
    assert first_build.digest.startswith("sha256:")
    assert "@sha256:" in first_build.base  # built FROM the pinned base, not its tag
    assert first_build.patches == tuple(p.id for p in PATCHES)


def test_pushed_image_carries_the_patched_files(docker_client: docker.DockerClient,
                                                first_build: ImageResult):
    # Forget the local copy, so the check reads what the registry serves. noprune: its
    # parent layers stay, the build cache of the later builds on the same base (the wandb step).
    docker_client.images.remove(first_build.tagged, force=True, noprune=True)
    with pytest.raises(docker.errors.ImageNotFound):
        docker_client.images.get(first_build.ref)
    details = verify_image(docker_client, first_build.ref, PATCHES)
    assert details["patched_files"]["maxtext-adafactor"] == \
        "/deps/src/maxtext/trainers/post_train/rl/utils_rl.py"
    assert details["patched_files"]["maxtext-wandb-project"] == \
        "/deps/src/maxtext/trainers/post_train/rl/train_rl.py"
    assert details["patched_files"]["tunix-reshard-chunk-call"].endswith(
        "site-packages/tunix/generate/vllm_sampler.py")
    # And the image's own Python imports the patched code from there.
    probe = ("import importlib.util as u, pathlib; "
             "s = pathlib.Path(u.find_spec('tunix').origin).parent / 'generate/vllm_sampler.py'; "
             "m = pathlib.Path(u.find_spec('maxtext').origin).parent / "
             "'trainers/post_train/rl/utils_rl.py'; t = m.with_name('train_rl.py'); "
             "print(s.read_text()); print(m.read_text()); print(t.read_text())")
    out = docker_client.containers.run(first_build.ref, ["python3", "-c", probe], remove=True,
                                       network_mode="none").decode()
    for patch in PATCHES:
        assert count_matches(out, patch) == 0, patch.id
        assert patch.replacement in out
    assert out.count("reshard_chunk_size=4") == 2


# What tunix's metrics logger does through metrax's WandbBackend once wandb imports
# (tunix/sft/metrics_logger.py:189-197 at c4ec573d; google-metrax 0.2.4 metrax/logging/
# wandb_backend.py:57-76: wandb.init(project, name, anonymous="allow"), wandb.log(..., step),
# wandb.finish()), with the project MaxText's train_rl passes once the declared patch
# maxtext-wandb-project is in (images/post-training/patches.yaml). The stand-in base carries
# tunix's and MaxText's files but not JAX, so the program itself cannot start here.
LOGGER = """
import importlib.util, os
assert importlib.util.find_spec("wandb") is not None  # tunix's try: WandbBackend(...)
import wandb
wandb.init(project=os.environ.get("WANDB_PROJECT") or "tunix", name="2026-12-03_10-00-00",
           anonymous="allow")
for step, loss in ((1, 0.9), (2, 0.5)):
    wandb.log({"actor/train/loss": loss}, step=step)
wandb.finish()
print(wandb.__version__)
"""


def test_the_image_logs_to_wandb_offline_with_the_gke_training_env(
        docker_client: docker.DockerClient, first_build: ImageResult, tmp_path: Path):
    """wandb (0.31.0, from the build context's locked wheels) imports in the
    pushed image and, given the W&B part of the GKE train workload's env, writes an offline
    run under the profile's project, entity and run group, with no network."""
    profile = tutorial_profile(**{"tracking.wandb.project": "qwen3-grpo",
                                  "tracking.wandb.entity": "my-team",
                                  "tracking.wandb.api_key.env": "WANDB_API_KEY"})
    env = {k: v for k, v in planned_workloads(profile)["train"].env if k.startswith("WANDB_")}
    assert env["WANDB_MODE"] == "online"
    env["WANDB_MODE"] = "offline"  # no network here: the same calls, kept as files to read
    container = docker_client.containers.create(first_build.ref, ["python3", "-c", LOGGER],
                                                environment=env, working_dir="/tmp",
                                                network_mode="none")
    try:
        container.start()
        status = container.wait(timeout=300)
        logs = container.logs().decode()
        assert status["StatusCode"] == 0, logs
        stream, _ = container.get_archive("/tmp/wandb")
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
            files = [m for m in tar if m.isfile() or m.isdir()]  # not its links to logs
            tar.extractall(tmp_path, members=files, filter="data")
    finally:
        container.remove(force=True)
    assert logs.strip().splitlines()[-1] == "0.31.0"
    [run_file] = tmp_path.glob("wandb/offline-run-*/run-*.wandb")
    run = run_record(run_file)
    assert (run.project, run.entity, run.run_group) == ("qwen3-grpo", "my-team",
                                                        Layout(profile).run_name)
    losses = {int(r["_step"]): float(r["actor/train/loss"]) for r in history(run_file)
              if "actor/train/loss" in r}
    assert losses == {1: 0.9, 2: 0.5}


def test_the_image_benchmark_builds_then_skips(docker_client: docker.DockerClient,
                                              standin_base: str) -> None:
    """benchmarks/image_build.py's quick run, FROM this session's stand-in base (not built
    again): a full build in a namespace of its own, then one skip with the same digest (the
    benchmark exits non-zero otherwise)."""
    from tests.support.benchmarks import assert_figures, run_quick

    out = run_quick("image_build", "--quick", "--base", standin_base, timeout=1200)
    assert_figures(out, "full build + push:", "skip path (median of 1):", "full / skip:")


def test_second_run_skips_with_the_same_digest(docker_client: docker.DockerClient,
                                               first_build: ImageResult, standin_base: str,
                                               registry_prefix: str):
    images_before = {image["Id"] for image in docker_client.api.images(all=True)}
    request = ImageRequest(base=standin_base, repository=f"{registry_prefix}/tpu-post-training")
    again = ensure_image(request, docker_client, FAST)
    assert not again.built
    assert again.ref == first_build.ref and again.tagged == first_build.tagged
    assert {image["Id"] for image in docker_client.api.images(all=True)} == images_before
    assert again.seconds < first_build.seconds / 5


def test_disabled_patch_is_left_out_of_the_image(docker_client: docker.DockerClient,
                                                 first_build: ImageResult, standin_base: str,
                                                 registry_prefix: str):
    request = ImageRequest(base=standin_base, repository=f"{registry_prefix}/tpu-post-training",
                           disabled_patches={"maxtext-adafactor": "measuring AdamW on purpose"})
    result = ensure_image(request, docker_client, FAST)
    assert result.built and result.tagged != first_build.tagged
    enabled = [p for p in PATCHES if p.id != "maxtext-adafactor"]
    details = verify_image(docker_client, result.ref, enabled)
    assert "maxtext-adafactor" not in details["patched_files"]
    text = docker_client.containers.run(
        result.ref, ["cat", "/deps/src/maxtext/trainers/post_train/rl/utils_rl.py"],
        remove=True, network_mode="none").decode()
    adafactor = next(p for p in PATCHES if p.id == "maxtext-adafactor")
    assert count_matches(text, adafactor) == 1  # upstream AdamW left alone


def test_a_moved_pattern_fails_the_build_naming_file_and_pattern(
        docker_client: docker.DockerClient, registry_prefix: str, moved_base: str):
    request = ImageRequest(base=moved_base, repository=f"{registry_prefix}/tpu-post-training-moved")
    with pytest.raises(ImageBuildFailed) as caught:
        ensure_image(request, docker_client, FAST)
    error = caught.value
    assert error.code == "image/patch-mismatch"
    assert error.diagnosis.category is FailureCategory.USER_ERROR
    message = str(error)
    assert f"/{SITE}/tunix/generate/vllm_sampler.py" in message
    assert "reshard_chunk_size: Optional[int] = None" in message and "found 0" in message
    assert "patches.yaml" in message  # says what to do
    tagged = f"{request.repository}:{ensure_tag(request, docker_client)}"
    assert remote_digest(docker_client, tagged, FAST) is None  # nothing was pushed


@pytest.mark.parametrize("versions", ["measured", "other-tunix"])
def test_a_patch_the_rehearsal_measured_failing_with_the_images_versions_is_refused(
        docker_client: docker.DockerClient, registry_prefix: str, versions: str,
        request: pytest.FixtureRequest):
    """The image's versions (what pip freeze lists, read in the image at build)
    are recorded with the image; with those the rehearsal measured the Adafactor patch
    failing, the build is refused before the push; with another tunix it is pushed.
    (The bases are conftest.py's, shared with test_cloud_build.py's builds on them.)"""
    from flows.backends.gke.image.verify import PatchMeasuredFailing

    base = request.getfixturevalue(f"{versions.replace('-', '_')}_base")
    image = ImageRequest(base=base, repository=f"{registry_prefix}/tpu-post-training-{versions}")
    if versions == "measured":
        with pytest.raises(PatchMeasuredFailing) as caught:
            ensure_image(image, docker_client, FAST)
        assert caught.value.code == "image/patch-measured-failing"
        assert "image.disabled_patches.maxtext-adafactor" in str(caught.value)
        tagged = f"{image.repository}:{ensure_tag(image, docker_client)}"
        assert remote_digest(docker_client, tagged, FAST) is None  # nothing was pushed
        return
    result = ensure_image(image, docker_client, FAST)
    assert result.built and result.checked["packages"] == OTHER_TUNIX


def ensure_tag(request: ImageRequest, client: docker.DockerClient) -> str:
    from flows.backends.gke.image.context import build_context, content_tag

    patches = request.patches()
    _, digest = pin_base(client, request.base, FAST)
    return content_tag(digest, patches, build_context(patches, request.sources))


def test_push_retries_while_the_registry_is_down(docker_client: docker.DockerClient,
                                                 standin_base: str, tmp_path: Path):
    # The stand-in base, not the built image: push() is the same for any image, and the
    # base has one layer to upload where the built one adds the wandb install's.
    _, base_digest = pin_base(docker_client, standin_base, FAST)
    port = free_port()
    repository = f"127.0.0.1:{port}/tpu-post-training-standin"
    docker_client.images.get(standin_base).tag(repository, "retry")
    config = registry_config(tmp_path, port)
    retries: list[tuple[int, str]] = []
    registry: list[subprocess.Popen[bytes]] = []

    def bring_registry_up(attempt: int, message: str, wait_s: float) -> None:
        retries.append((attempt, message))
        if not registry:
            registry.append(subprocess.Popen(["docker-registry", "serve", str(config)],
                                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            time.sleep(0.5)

    try:
        digest = push(docker_client, repository, "retry", FAST, bring_registry_up)
    finally:
        docker_client.images.remove(f"{repository}:retry")
        for process in registry:
            process.terminate()
            process.wait(timeout=10)
    assert retries and retries[0][0] == 1
    assert "connection refused" in retries[0][1]
    assert digest == base_digest  # same manifest, another registry


def test_no_daemon_error_says_where_one_must_come_from(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    with pytest.raises(DockerUnavailable) as caught:
        connect(timeout_s=5)
    message = str(caught.value)
    assert str(tmp_path) in message
    assert "Kubernetes work pool" in message and "scripts/docker-services.sh" in message
    assert caught.value.code == "image/no-docker-daemon"
    assert caught.value.diagnosis.category is FailureCategory.INFRASTRUCTURE
