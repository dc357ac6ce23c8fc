"""Images a GKE run pulls: the Pathways server and proxy are pulled as
TAG@DIGEST when the profile pins their digests; a tag-only base or Pathways image is named
in `tpurl validate`'s warnings with the fix; a malformed digest is refused; a profile that
pins nothing keeps its infra key (its deployment keeps its records)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from flows.backends.gke.jobs.options import options_for
from flows.backends.gke.planning import unpinned_image_warnings
from flows.common.paths import REPO_ROOT
from flows.config import load_profile
from flows.config.errors import ProfileError
from flows.core.layout import infra_key
from tests.support.profiles import TUTORIAL, TUTORIAL_REQUIRED

SERVER, PROXY = "sha256:" + "a" * 64, "sha256:" + "b" * 64
TPURL = str(Path(sys.executable).with_name("tpurl"))


def _profile(**extra: str):
    return load_profile(TUTORIAL, {**TUTORIAL_REQUIRED, **extra}, environ={})


def test_pinned_pathways_images_are_pulled_by_digest() -> None:
    options = options_for(_profile(**{"gke.pathways_server_digest": SERVER,
                                      "gke.pathways_proxy_digest": PROXY}))
    assert options.server_image.endswith(f"/server:jax-0.11.0@{SERVER}")
    assert options.proxy_image.endswith(f"/proxy_server:jax-0.11.0@{PROXY}")
    plain = options_for(_profile())
    assert plain.server_image.endswith("/server:jax-0.11.0")


def test_pinning_nothing_keeps_the_infra_key_and_pinning_changes_it() -> None:
    plain = _profile()
    assert infra_key(plain) == infra_key(_profile())
    assert infra_key(_profile(**{"gke.pathways_server_digest": SERVER})) != infra_key(plain)


@pytest.mark.parametrize("value", ["latest", "sha256:abc", "a" * 64, "sha256:" + "G" * 64])
def test_a_malformed_digest_is_refused_with_the_fix(value: str) -> None:
    with pytest.raises(ProfileError) as refused:
        _profile(**{"gke.pathways_proxy_digest": value})
    (issue,) = refused.value.issues
    assert issue.field == "gke.pathways_proxy_digest" and "sha256:" in issue.fix


def test_tag_only_images_are_named_in_the_warnings() -> None:
    warnings = unpinned_image_warnings(_profile())
    assert any("image.base" in w and "pinned by tag only" in w for w in warnings)
    assert any("gke.pathways_server_digest and gke.pathways_proxy_digest" in w for w in warnings)
    base = "us-docker.pkg.dev/cloud-tpu-images/maxtext-images/tpu_post_training:0.2.4@" + SERVER
    assert unpinned_image_warnings(_profile(**{
        "image.base": base, "gke.pathways_server_digest": SERVER,
        "gke.pathways_proxy_digest": PROXY})) == []


def test_tpurl_validate_prints_them() -> None:
    args = [f"--set={k}={v}" for k, v in TUTORIAL_REQUIRED.items()]
    done = subprocess.run([TPURL, "validate", TUTORIAL, *args], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert "pinned by tag only" in done.stdout + done.stderr
