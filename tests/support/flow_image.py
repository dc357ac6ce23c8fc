"""The flow image as `prefect deploy` builds it here: FROM the Debian-packages base of
scripts/debian-base-image.sh (no image registry is reachable), CLOUD_TOOLS=0 (their download
hosts are not either), built with host networking (the test dockerd has no bridge) and
pushed to the local registry."""

from __future__ import annotations

import os
import subprocess

from flows.common.paths import REPO_ROOT
from tests.support.docker import REGISTRY

BASE_SCRIPT = REPO_ROOT / "scripts" / "debian-base-image.sh"


def debian_base_image() -> str:
    """The base, pushed to the local registry under a fixed repository: its tag is a hash
    of its recipe, so a second session (or test module) finds it and returns at once."""
    done = subprocess.run(["bash", str(BASE_SCRIPT), f"{REGISTRY}/tpurl-debian-base"],
                          capture_output=True, text=True, env=os.environ.copy(), timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


def deploy_env(base: dict[str, str], repository: str, base_image: str) -> dict[str, str]:
    """The environment of `prefect deploy` that builds the image for this machine."""
    return {**base, "TPURL_FLOW_IMAGE": repository, "TPURL_FLOW_BASE_IMAGE": base_image,
            "TPURL_FLOW_CLOUD_TOOLS": "0", "TPURL_FLOW_BUILD_NETWORK": "host",
            "DOCKER_HOST": os.environ["DOCKER_HOST"]}
