"""Rehearsal parity: the plan says where the rehearsal's lock differs from the
post-training image and what the rehearsal therefore does not prove; a patch the rehearsal
measured failing with the versions an image carries is refused (pure parts; the builds that
refuse it are in test_build.py and test_cloud_build.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from flows.backends.gke.image.parity import (
    KNOWN_BASE_PACKAGES,
    parity_lines,
    read_rehearsal_versions,
    rehearsal_versions,
)
from flows.common.paths import PATCHES_FILE, REPO_ROOT
from flows.core.patching import (
    PARITY_PACKAGES,
    PatchDeclaration,
    commit_of,
    load_declarations,
    measured_failure,
    tracked_versions,
)
from flows.operations.plan import build_plan, render_text
from tests.support.profiles import tutorial_profile

LOCK = read_rehearsal_versions()
BASE = "us-docker.pkg.dev/cloud-tpu-images/maxtext-images/tpu_post_training:0.2.4"
ADAFACTOR = next(p for p in load_declarations(PATCHES_FILE) if p.id == "maxtext-adafactor")
MEASURED = {"maxtext": "0.2.4", "google-tunix": "0.1.7", "jax": "0.11.0"}


def test_the_lock_is_read_by_normalised_name() -> None:
    assert LOCK["google-tunix"].startswith("0.1.8@") and LOCK["maxtext"] == "0.2.4"
    assert LOCK["orbax-checkpoint"] == "0.12.2" and "vllm" not in LOCK


def test_the_measured_failure_names_pypis_tunix_not_the_images() -> None:
    """Adafactor failed with PyPI's tunix 0.1.7 and trains with the image's commit (measured
    by the rehearsal, images/post-training/patches.yaml): an image with 0.1.7 is refused, the
    tutorial's base (0.1.8@c4ec573d) is not."""
    assert ADAFACTOR.failed_in_rehearsal == MEASURED
    assert LOCK["google-tunix"] != MEASURED["google-tunix"]
    assert measured_failure(ADAFACTOR, KNOWN_BASE_PACKAGES[BASE]) is None


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
    assert f"google-tunix: rehearsal {LOCK['google-tunix']}, image 0.2.0: the rehearsal does " \
        "not prove train" in text
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
    assert f"google-tunix: {LOCK['google-tunix']} in both" in text
    assert "patch maxtext-adafactor: failed in the rehearsal with google-tunix==0.1.7" in text


def test_a_built_images_record_says_missing_packages_are_missing_not_unknown() -> None:
    text = "\n".join(parity_lines(BASE, LOCK, {"maxtext": "0.2.4"}, []))
    assert "vllm: not installed in either" in text
    assert "orbax-checkpoint: rehearsal 0.12.2, image not installed: the rehearsal does not " \
        "prove convert, train and export" in text
    assert "unknown until it is built" not in text


COMMIT = "c4ec573d29e4c3a3955b348256d464b119c8a6d1"


def test_the_rehearsal_and_the_known_base_name_the_same_tunix_commit() -> None:
    """MaxText maxtext-v0.2.4 src/dependencies/extra_deps/post_train_github_deps.txt:1 installs
    tunix from a GitHub archive of this commit (pyproject 0.1.8); the rehearsal installs it
    too (images/rehearsal/tunix-from-github.txt, or the wheel built from it)."""
    assert LOCK["google-tunix"] == f"0.1.8@{COMMIT}"
    assert KNOWN_BASE_PACKAGES[BASE]["google-tunix"] == f"0.1.8@{COMMIT}"
    text = "\n".join(parity_lines(BASE, LOCK, None, []))
    assert f"google-tunix: 0.1.8@{COMMIT} in both" in text
    other = "\n".join(parity_lines(BASE, LOCK, {**LOCK, "google-tunix": "0.1.8@" + "f" * 40}, []))
    assert f"google-tunix: rehearsal 0.1.8@{COMMIT}, image 0.1.8@{'f' * 40}: the rehearsal " \
        "does not prove train" in other
    unknown = "\n".join(parity_lines(BASE, LOCK, {**LOCK, "google-tunix": "0.1.8"}, []))
    assert f"rehearsal 0.1.8@{COMMIT}, image 0.1.8: the rehearsal does not prove" in unknown


def test_only_a_git_line_of_a_locked_package_adds_a_commit() -> None:
    lock = "google-tunix==0.1.8 \\\n    --hash=sha256:" + "a" * 64 + "\njax==0.11.0 \\\n"
    assert rehearsal_versions(lock, f"# a comment naming {COMMIT}\n") == {
        "google-tunix": "0.1.8", "jax": "0.11.0"}
    assert rehearsal_versions(lock, f"google_tunix @ git+https://github.com/google/tunix@{COMMIT}"
                              f"\nother @ git+https://x/y@{COMMIT}\n") == {
        "google-tunix": f"0.1.8@{COMMIT}", "jax": "0.11.0"}


@pytest.mark.parametrize(("direct_url", "commit"), [
    # PEP 610 records: uv/pip write these for the archive MaxText names, a git install, an
    # index install (no file), a local directory
    (json.dumps({"url": f"https://github.com/google/tunix/archive/{COMMIT}.zip",
                 "archive_info": {}}), COMMIT),
    (json.dumps({"url": "https://github.com/google/tunix",
                 "vcs_info": {"vcs": "git", "commit_id": COMMIT}}), COMMIT),
    (None, None),
    (json.dumps({"url": "file:///src/tunix", "dir_info": {}}), None),
    ("{not json", None),
    (json.dumps({"url": "https://github.com/google/tunix/archive/main.zip",
                 "archive_info": {}}), None),
])
def test_the_commit_a_distribution_was_installed_from(direct_url: str | None,
                                                      commit: str | None) -> None:
    assert commit_of(direct_url) == commit


def test_installed_versions_writes_a_commit_install_as_version_at_commit(tmp_path: Path) -> None:
    """As the image's record reads it (apply_patches.py, check_patches.py), over real
    .dist-info folders on sys.path."""
    for name, direct in (("google_tunix-0.1.8", {"url": "https://github.com/google/tunix/"
                                                 f"archive/{COMMIT}.zip", "archive_info": {}}),
                         ("jax-0.11.0", None)):
        info = tmp_path / f"{name}.dist-info"
        info.mkdir()
        dist, version = name.split("-")
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist.replace('_', '-')}\n"
                                       f"Version: {version}\n")
        if direct:
            (info / "direct_url.json").write_text(json.dumps(direct))
    code = ("import json, sys; sys.path[:0] = [sys.argv[1], sys.argv[2]]; "
            "from patching import installed_versions; print(json.dumps(installed_versions()))")
    out = subprocess.run([sys.executable, "-I", "-c", code, str(tmp_path),
                          str(REPO_ROOT / "flows" / "core")], capture_output=True, text=True,
                         check=True)
    found = tracked_versions(json.loads(out.stdout))
    assert found["google-tunix"] == f"0.1.8@{COMMIT}" and found["jax"] == "0.11.0"
