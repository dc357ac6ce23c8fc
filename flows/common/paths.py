"""Where the repository's data lives: profiles, image definitions, rehearsal scripts.

The pipeline is deployed from this repository (prefect deploy pulls it), so these files are
found relative to the package rather than installed as package data.
"""

from __future__ import annotations

import hashlib
import os
from functools import cache
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
PROFILES_DIR = REPO_ROOT / "deployments" / "profiles"
IMAGES_DIR = REPO_ROOT / "images"
PATCHES_FILE = IMAGES_DIR / "post-training" / "patches.yaml"
REHEARSAL_DIR = IMAGES_DIR / "rehearsal"
REHEARSAL_LOCK = REHEARSAL_DIR / "requirements.lock"
# the tunix commit the rehearsal installs beside the lock (flows/backends/local/tunix_source.py)
TUNIX_GITHUB_FILE = REHEARSAL_DIR / "tunix-from-github.txt"
HF_CHECK_LOCK = REHEARSAL_DIR / "hf-check-requirements.txt"
REHEARSAL_SCRIPTS = ("make_tiny_model.py", "make_dataset.py", "rewards.py", "train_rl_cpu.py",
                     "to_huggingface_gc.py", "check_hf_export.py")


def file_uri(path: str | Path) -> str:
    return "file://" + os.path.abspath(path)


def repo_relative(path: str) -> Path:
    """A profile's path: ~ expanded, relative ones taken from the repository root."""
    expanded = Path(os.path.expanduser(path))
    return expanded if expanded.is_absolute() else REPO_ROOT / expanded


@cache
def file_digest(path: Path) -> str:
    """A short content hash of a repository file that is part of a key ("absent" if none)."""
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16] if path.is_file() else "absent"


def default_cache_dir(environ: dict[str, str] | None = None) -> Path:
    """Caches and error reports that belong to this machine, not to any output root."""
    env = os.environ if environ is None else environ
    if env.get("TPURL_CACHE_DIR"):
        return Path(env["TPURL_CACHE_DIR"])
    base = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tpurl"
