"""The real upstream files the patch tests and the image stand-in read, at the image's versions.

MaxText 0.2.4 comes from PyPI (pip download, cached); tunix as the tpu_post_training:0.2.4 image
carries it, the GitHub commit MaxText 0.2.4 pins (src/dependencies/extra_deps/
post_train_github_deps.txt:1), got the way the rehearsal's image stage gets it
(flows/backends/local/tunix_source.py): the wheel in $TPURL_WHEEL_DIR with the lock's sha256,
or one pip builds from the commit where GitHub is reachable; neither raises the error naming
both.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from flows.backends.local.tunix_source import load_pin, resolve_source
from flows.common.paths import REHEARSAL_LOCK, REPO_ROOT

CACHE = REPO_ROOT / ".tpurl" / "cache" / "wheels"


def pypi_wheel(requirement: str) -> Path:
    """The wheel of a pinned requirement, downloaded once into the shared cache."""
    name, version = requirement.split("==")
    pattern = f"{name.replace('-', '_')}-{version}-*.whl"
    wheels = sorted(CACHE.glob(pattern))
    if not wheels:
        CACHE.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet",
                        "--disable-pip-version-check", "-d", str(CACHE), requirement], check=True)
        wheels = sorted(CACHE.glob(pattern))
    return wheels[0]


def image_tunix_wheel() -> Path:
    pin = load_pin(REHEARSAL_LOCK)
    source = resolve_source(pin)
    if source.kind == "wheel":
        assert source.wheel_dir is not None
        return source.wheel_dir / pin.wheel_name
    built = CACHE / f"google-tunix-{pin.commit}"
    if not sorted(built.glob("google_tunix-*.whl")):
        subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet",
                        "--disable-pip-version-check", "-w", str(built),
                        f"git+{pin.repo_url}@{pin.commit}"], check=True)
    return sorted(built.glob("google_tunix-*.whl"))[0]
