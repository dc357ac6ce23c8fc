"""The pure parts of the image build: content tag, retry classification, messages."""

from __future__ import annotations

from pathlib import Path

import pytest

from flows.backends.gke.image.build import ImageRequest, mismatch_message
from flows.backends.gke.image.context import SOURCES, BuildContext, build_context, content_tag
from flows.backends.gke.image.daemon import unavailable_advice
from flows.backends.gke.image.retry import Backoff, TransientError, call_with_retries, is_transient
from flows.backends.gke.image.verify import PatchNotInImage, check_patched
from flows.core.patching import load_declarations
from flows.core.paths import PATCHES_FILE

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
    assert [p.id for p in ok.patches()] == ["tunix-reshard-chunk-default", "tunix-reshard-chunk-call"]


@pytest.mark.parametrize(("message", "transient"), [
    ("received unexpected HTTP status: 503 Service Unavailable", True),
    ('Get "http://127.0.0.1:5001/v2/": dial tcp 127.0.0.1:5001: connect: connection refused', True),
    ("toomanyrequests: quota exceeded", True),
    ("net/http: TLS handshake timeout", True),
    ("unauthorized: authentication required", False),
    ("denied: Permission 'artifactregistry.repositories.uploadArtifacts' denied", False),
    ("name unknown: repository not found", False),
])
def test_transient_classification(message: str, transient: bool):
    assert is_transient(message) is transient


def test_retries_wait_by_backoff_then_give_up():
    waits: list[float] = []
    calls: list[int] = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise TransientError("503")
        return "ok"

    assert call_with_retries(flaky, Backoff(attempts=4, first_s=1, factor=3), sleep=waits.append) == "ok"
    assert waits == [1, 3]

    def always() -> str:
        raise TransientError("503")

    with pytest.raises(TransientError):
        call_with_retries(always, Backoff(attempts=3, first_s=1, max_s=1.5), sleep=waits.append)
    assert waits[2:] == [1, 1.5]


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
