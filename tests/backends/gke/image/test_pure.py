"""The pure parts of the image build: content tag, error diagnoses, messages. (Registry
retry classification and backoff are flows.core.retry's: tests/core/test_retry.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from flows.backends.gke.image.build import ImageRequest, mismatch_message
from flows.backends.gke.image.context import SOURCES, BuildContext, build_context, content_tag
from flows.backends.gke.image.daemon import DockerUnavailable, unavailable_advice
from flows.backends.gke.image.errors import (
    BaseImageNotFound,
    ImageBuildFailed,
    ImageError,
    PushFailed,
    RegistryUnavailable,
)
from flows.backends.gke.image.verify import PatchNotInImage, check_patched
from flows.common.paths import PATCHES_FILE
from flows.core.failures import FailureCategory, StageFailed
from flows.core.patching import load_declarations

PATCHES = load_declarations(PATCHES_FILE)


def test_content_tag_follows_base_digest_patches_and_every_build_file():
    context = build_context(PATCHES)
    tag = content_tag("sha256:aa", PATCHES, context)
    assert tag == content_tag("sha256:aa", PATCHES, build_context(PATCHES))  # stable
    assert tag != content_tag("sha256:bb", PATCHES, context)
    assert tag != content_tag("sha256:aa", PATCHES[:2], build_context(PATCHES[:2]))
    for name in context.files:
        changed = BuildContext({**context.files, name: context.files[name] + b"\n"})
        assert content_tag("sha256:aa", PATCHES, changed) != tag, name
    assert tag.startswith("tpurl-") and len(tag) <= 128


def test_build_context_carries_the_real_patching_module_and_enabled_ids():
    context = build_context(PATCHES[1:])
    assert context.files["patching.py"] == SOURCES["patching.py"].read_bytes()
    assert context.files["enabled-patches.txt"].decode().split() == [p.id for p in PATCHES[1:]]


def test_disabled_patches_must_be_declared():
    request = ImageRequest(base="b:1", repository="r", disabled_patches={"nope": "a reason here"})
    with pytest.raises(ValueError, match="undeclared patch"):
        request.patches()
    ok = ImageRequest(base="b:1", repository="r",
                      disabled_patches={"maxtext-adafactor": "testing AdamW on purpose"})
    assert [p.id for p in ok.patches()] == ["tunix-reshard-chunk-default", "tunix-reshard-chunk-call",
                                            "maxtext-wandb-project"]


def test_mismatch_message_is_taken_from_the_build_output():
    lines = ["Step 5/6 : RUN ...", "tpurl: PATCH MISMATCH: patch 'x' expected 1 match(es) in a.py"]
    assert mismatch_message(lines) == "patch 'x' expected 1 match(es) in a.py"
    assert mismatch_message(["Step 1/6"]) is None


def test_no_daemon_advice_names_both_ways_out():
    advice = unavailable_advice("unix:///var/run/docker.sock")
    assert "scripts/docker-services.sh" in advice
    assert "Kubernetes work pool" in advice and "dind" in advice and "remote builder" in advice


def test_check_patched_rejects_an_unpatched_file(tmp_path: Path):
    patch = PATCHES[-1]
    manifest = {"patches": [{"id": patch.id, "path": "/f.py"}]}
    with pytest.raises(PatchNotInImage, match=patch.id):
        check_patched(manifest, {"/f.py": "optax.adamw(learning_rate, b1=0.9)"}, [patch])
    assert check_patched(manifest, {"/f.py": patch.replacement}, [patch]) == {patch.id: "/f.py"}


def test_request_from_the_tutorial_profile(tutorial_overrides: dict[str, str]):
    from flows.backends.gke.image import request_from_profile
    from flows.config import load_profile

    profile = load_profile("qwen3-30b-a3b-v6e-32", tutorial_overrides, {})
    request = request_from_profile(profile)
    assert request.base.endswith("tpu_post_training:0.2.4")
    assert request.repository == "us-east5-docker.pkg.dev/my-proj-123/tpurl/tpu-post-training"


INFRA, USER = FailureCategory.INFRASTRUCTURE, FailureCategory.USER_ERROR


@pytest.mark.parametrize(("error", "category", "code"), [
    (DockerUnavailable("unix:///x.sock", "refused"), INFRA, "image/no-docker-daemon"),
    (PushFailed("503 Service Unavailable", infrastructure=True, attempts=5), INFRA, "image/push-failed"),
    (RegistryUnavailable("r:1", "connection refused", 5), INFRA, "image/registry-unavailable"),
    (PushFailed("unauthorized: authentication required", infrastructure=False, attempts=1), USER,
     "image/push-failed"),
    (BaseImageNotFound("b:1", "not in its registry"), USER, "image/base-not-found"),
    (ImageBuildFailed("step 5 failed", "tail", "patch 'x' expected 1 match(es)"), USER,
     "image/patch-mismatch"),
    (ImageBuildFailed("step 5 failed", "tail"), USER, "image/build-failed"),
    (PatchNotInImage("the image applied [], expected ['x']"), USER, "image/patch-not-in-effect"),
    (ImageError("/f is not a regular file in the image"), USER, "image/error"),
])
def test_image_errors_carry_their_diagnosis(error: ImageError, category: FailureCategory,
                                            code: str):
    diagnosis = error.diagnosis
    assert diagnosis.category is category and diagnosis.code == code == error.code
    assert diagnosis.retryable is (category is INFRA)
    assert code not in diagnosis.summary and "\n" not in diagnosis.summary  # a field, not text
    assert diagnosis.detail == str(error) and diagnosis.fix == error.fix
    failed = StageFailed("image", diagnosis)
    assert f"[{category}] " in str(failed) and f"\n  code: {code}\n" in str(failed)
