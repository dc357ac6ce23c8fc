"""Rehearsal parity (issue 18.10): the plan says where the rehearsal's lock differs from the
post-training image and what the rehearsal therefore does not prove; a patch the rehearsal
measured failing with the versions an image carries is refused (pure parts; the builds that
refuse it are in test_build.py and test_cloud_build.py)."""

from __future__ import annotations

from flows.backends.gke.image.parity import lock_versions, parity_lines
from flows.common.paths import PATCHES_FILE, REPO_ROOT
from flows.core.patching import (
    PARITY_PACKAGES,
    PatchDeclaration,
    load_declarations,
    measured_failure,
    tracked_versions,
)
from flows.plan import build_plan, render_text
from tests.support.profiles import tutorial_profile

LOCK = lock_versions((REPO_ROOT / "images/rehearsal/requirements.lock").read_text())
BASE = "us-docker.pkg.dev/cloud-tpu-images/maxtext-images/tpu_post_training:0.2.4"
ADAFACTOR = next(p for p in load_declarations(PATCHES_FILE) if p.id == "maxtext-adafactor")
MEASURED = {"maxtext": "0.2.4", "google-tunix": "0.1.7", "jax": "0.11.0"}


def test_the_lock_is_read_by_normalised_name() -> None:
    assert LOCK["google-tunix"] == "0.1.7" and LOCK["maxtext"] == "0.2.4"
    assert LOCK["orbax-checkpoint"] == "0.12.2" and "vllm" not in LOCK


def test_the_measured_failure_is_declared_with_the_locks_versions() -> None:
    assert ADAFACTOR.failed_in_rehearsal == MEASURED
    assert all(LOCK[name] == version for name, version in MEASURED.items())


def test_an_image_with_the_measured_versions_refuses_the_patch_and_others_do_not() -> None:
    why = measured_failure(ADAFACTOR, {"MaxText": "0.2.4", "google_tunix": "0.1.7",
                                       "jax": "0.11.0", "vllm": "0.11.1"})
    assert why and "image.disabled_patches.maxtext-adafactor" in why
    assert measured_failure(ADAFACTOR, {**MEASURED, "google-tunix": "0.1.8"}) is None
    assert measured_failure(ADAFACTOR, {"maxtext": "0.2.4"}) is None  # unknown is not same
    plain = PatchDeclaration("x", "a/b.py", "literal", "p", "r", 1, "why")
    assert measured_failure(plain, MEASURED) is None


def test_each_package_says_same_differs_or_unknown_and_what_is_not_proven() -> None:
    image = {**{n: LOCK.get(n, "9") for n in PARITY_PACKAGES}, "google-tunix": "0.2.0"}
    lines = parity_lines(BASE, LOCK, image, [ADAFACTOR])
    text = "\n".join(lines)
    assert "google-tunix: rehearsal 0.1.7, image 0.2.0: the rehearsal does not prove train" \
        in text
    assert "maxtext: 0.2.4 in both" in text and "jax: 0.11.0 in both" in text
    assert "vllm: rehearsal not installed, image 9: the rehearsal does not prove" in text
    assert "refuses it before pushing if the built image carries them" in text
    refused = "\n".join(parity_lines(BASE, LOCK, MEASURED, [ADAFACTOR]))
    assert "this image carries them: the image stage refuses it before pushing" in refused
    assert tracked_versions({"Orbax_Checkpoint": "1", "numpy": "2"}) == {
        "orbax-checkpoint": "1"}


def test_the_tutorial_plan_shows_the_parity_section() -> None:
    profile = tutorial_profile()
    text = render_text(profile, build_plan(profile))
    assert "rehearsal parity (images/rehearsal/requirements.lock vs " + BASE in text
    assert "google-tunix: rehearsal 0.1.7, image unknown until it is built: the rehearsal " \
        "does not prove train" in text
    assert "patch maxtext-adafactor: failed in the rehearsal with google-tunix==0.1.7" in text


def test_a_built_images_record_says_missing_packages_are_missing_not_unknown() -> None:
    text = "\n".join(parity_lines(BASE, LOCK, {"maxtext": "0.2.4"}, []))
    assert "vllm: not installed in either" in text
    assert "orbax-checkpoint: rehearsal 0.12.2, image not installed: the rehearsal does not " \
        "prove convert, train and export" in text
    assert "unknown until it is built" not in text
