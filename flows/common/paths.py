"""Where the repository's data lives: profiles, image definitions, rehearsal scripts.

The pipeline is deployed from this repository (prefect deploy pulls it), so these files are
found relative to the package rather than installed as package data.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
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
# programs of ours a GKE workload ships beside the image (flows/backends/gke/jobs/
# program_files.py): the evaluation program, and the guard in front of a recipe's rewards.
# Here, not beside their users, so a profile's check can weigh them before anything ships.
EVAL_PROGRAM = REHEARSAL_DIR / "evaluate_rl.py"
REWARD_GUARD = REHEARSAL_DIR / "reward_guard.py"
SERVED_CLIENT = REHEARSAL_DIR / "served_completions.py"  # a watch's serving canary's client
# the rehearsal's programs, part of what its "image" is (its reward is the profile's recipe,
# keyed by content in the training's key instead)
REHEARSAL_SCRIPTS = ("make_tiny_model.py", "make_dataset.py", "train_rl_cpu.py",
                     "to_huggingface_gc.py", "check_hf_export.py")


def file_uri(path: str | Path) -> str:
    return "file://" + os.path.abspath(path)


def repo_relative(path: str) -> Path:
    """A profile's path: ~ expanded, relative ones taken from the repository root."""
    expanded = Path(os.path.expanduser(path))
    return expanded if expanded.is_absolute() else REPO_ROOT / expanded


@cache
def file_digest(path: Path) -> str:
    """A short content hash of a repository file that is part of a key ("absent" if none);
    read once per process: the repository's files do not change under a run."""
    return content_digest(path)


def content_digest(path: Path) -> str:
    """``file_digest`` read afresh each time: for a user's file that may be edited between
    two runs of one process (a recipe's reward file), whose key must follow its bytes."""
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16] if path.is_file() else "absent"


def default_cache_dir(environ: dict[str, str] | None = None) -> Path:
    """Caches and error reports that belong to this machine, not to any output root."""
    env = os.environ if environ is None else environ
    if env.get("TPURL_CACHE_DIR"):
        return Path(env["TPURL_CACHE_DIR"])
    base = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tpurl"


def tool_places(environ: dict[str, str] | None = None) -> tuple[Path, ...]:
    """Where the tool's own files may live (flows/common/ownership.py), resolved: the
    repository, the cache directory and the system's temporary directory."""
    found = (REPO_ROOT, default_cache_dir(environ), Path(tempfile.gettempdir()))
    return tuple(dict.fromkeys(Path(os.path.realpath(p)) for p in found))


_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]+")


def path_part(text: str, fallback: str = "run", limit: int = 120) -> str:
    """One safe file-name part made of untrusted text (a run name carrying an announced
    revision, a dataset's file name): every run of characters other than letters, digits and
    ``. _ + -`` (slashes, control characters, spaces) becomes one ``-``, leading dots and
    dashes go (no ``..``, no hidden file, no option), and it is cut to ``limit``
    characters. Prefect allows ``/`` in run names: an announced revision ``../../x``
    would otherwise write result files four directories above their place."""
    part = re.sub(r"\.{2,}", ".", _UNSAFE.sub("-", text)).lstrip(".-")[:limit].rstrip(".-")
    return part or fallback
