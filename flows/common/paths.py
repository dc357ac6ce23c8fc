"""Where the repository's data lives: profiles, image definitions, rehearsal scripts.

The pipeline is deployed from this repository (prefect deploy pulls it), so these files are
found relative to the package rather than installed as package data.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
PROFILES_DIR = REPO_ROOT / "deployments" / "profiles"
IMAGES_DIR = REPO_ROOT / "images"
PATCHES_FILE = IMAGES_DIR / "post-training" / "patches.yaml"
REHEARSAL_DIR = IMAGES_DIR / "rehearsal"


def default_cache_dir(environ: dict[str, str] | None = None) -> Path:
    """Caches and error reports that belong to this machine, not to any output root."""
    env = os.environ if environ is None else environ
    if env.get("TPURL_CACHE_DIR"):
        return Path(env["TPURL_CACHE_DIR"])
    base = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tpurl"
