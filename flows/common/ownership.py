"""What the tool may write and delete on this machine: its places, and the directories it made.

Why: the image stage removes a venv directory it finds without ``bin/python`` and builds it
again, so a profile naming ``local.venv: ~`` would otherwise have it remove the user's home.
Two rules close it, each alone enough for the worst case:

* **Places.** A path a profile names for the tool's own files (``local.root``,
  ``local.venv``, ``local.hf_check_venv``) must resolve, symlinks followed, strictly inside
  the repository, the cache directory (``TPURL_CACHE_DIR`` or ``~/.cache/tpurl``) or the
  system's temporary directory (throwaway rehearsals and tests). ``~``, ``/``, ``..`` out of
  the repository and a symlink pointing elsewhere are refused at validation.
* **Ownership.** A directory is removed only when it carries :data:`OWNER_MARKER`, which
  :func:`claim` writes into a directory it has just created, before anything is installed
  into it. A directory without it (a home, a project, a venv someone made by hand) is
  refused with what to do, never emptied.
* **Owner.** The marker is a file anyone who can write the directory can make, so it counts
  only together with who owns what: the directory and its marker must belong to the user
  running the tool, and before a removal nothing inside may belong to another user. Another
  local user who plants a marker in a directory of theirs (or makes a directory of ours
  hold their files) gets a refusal, never a deletion, even when the tool runs as root.

Pure apart from the file-system reads it names; imports nothing of ``flows`` (the places
themselves are ``flows.common.paths.tool_places``).
"""

from __future__ import annotations

import os
import pwd
import shutil
from pathlib import Path

OWNER_MARKER = ".tpurl-owned"
# Written by our installer after a completed install, before the marker existed: a venv
# carrying it was built by this tool, so it counts as ours (kept for venvs made earlier).
LEGACY_MARKERS = ("tpurl-installed-lock.txt",)


def _owner(uid: int) -> str:
    try:
        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except KeyError:
        return f"uid {uid}"


def _foreign(path: Path) -> str | None:
    """Why ``path`` (not followed) is not the running user's, or None."""
    uid = path.lstat().st_uid
    if uid != os.geteuid():
        return (f"belongs to {_owner(uid)}, not to {_owner(os.geteuid())} that runs tpurl; "
                "the tool never deletes or writes into another user's files")
    return None


class NotOurs(Exception):
    """A directory the tool was about to remove, or write into, that it did not create."""

    def __init__(self, path: Path, why: str) -> None:
        super().__init__(f"{path}: {why}")
        self.path = path
        self.why = why


def place_problem(path: Path, allowed: tuple[Path, ...]) -> str | None:
    """Why ``path`` may not hold the tool's own files (None: it may).

    Resolved with symlinks followed (``realpath``), so a link inside the repository that
    points at the home directory is judged by where it points; and strictly inside one of
    ``allowed`` (resolved places), so a place itself is never a venv or an output root."""
    real = Path(os.path.realpath(path))
    for place in allowed:
        if real != place and real.is_relative_to(place):
            return None
    shown = f"{path} (which resolves to {real})" if str(real) != str(path) else str(path)
    return (f"{shown} is not inside the repository, the cache directory or the temporary "
            f"directory ({', '.join(str(p) for p in allowed)}); the tool creates and deletes "
            "files there")


def is_inside(path: Path, root: Path) -> bool:
    """Whether ``path``, symlinks followed, is ``root`` or below it (``root`` resolved too)."""
    return Path(os.path.realpath(path)).is_relative_to(Path(os.path.realpath(root)))


def claim(directory: Path) -> None:
    """Create ``directory`` as ours: it must not exist yet (or be empty), and gets the marker
    before anything else is written into it."""
    if directory.is_symlink():
        raise NotOurs(directory, "is a symbolic link; the tool creates its directories itself")
    directory.mkdir(parents=True, exist_ok=True)
    if why := _foreign(directory):
        raise NotOurs(directory, why)
    if any(p.name != OWNER_MARKER for p in directory.iterdir()):
        raise NotOurs(directory, "already holds files the tool did not put there")
    marker = directory / OWNER_MARKER
    if marker.is_symlink() or (marker.exists() and _foreign(marker)):
        raise NotOurs(directory, f"holds a {OWNER_MARKER} the tool did not write")
    marker.write_text("created by tpurl; it may delete this directory\n")


def ownership_problem(directory: Path) -> str | None:
    """Why ``directory`` is not one the tool made (None: it is): a real directory (not a
    link) of the running user, carrying one of our markers, a regular file of that user."""
    if directory.is_symlink() or not directory.is_dir():
        return "is not a directory (a symbolic link, a file or nothing)"
    if why := _foreign(directory):
        return why
    markers = [directory / name for name in (OWNER_MARKER, *LEGACY_MARKERS)]
    found = [m for m in markers if m.is_file() and not m.is_symlink()]
    if not found:
        return (f"exists without the tool's marker ({OWNER_MARKER}); the tool never deletes a "
                "directory it did not create")
    if all(_foreign(m) for m in found):
        return f"its {found[0].name} {_foreign(found[0])}"
    return None


def owned(directory: Path) -> bool:
    """Whether ``directory`` is ours: see :func:`ownership_problem`."""
    return ownership_problem(directory) is None


def _foreign_inside(directory: Path) -> str | None:
    """The first entry below ``directory`` (links not followed) of another user, if any."""
    for top, dirs, files in os.walk(directory):
        for name in (*dirs, *files):
            if why := _foreign(Path(top) / name):
                return f"holds {Path(top) / name}, which {why}"
    return None


def remove_owned(directory: Path) -> None:
    """Remove a directory the tool made; refuse (:class:`NotOurs`) any other, touching nothing."""
    if not directory.exists() and not directory.is_symlink():
        return
    if (why := ownership_problem(directory)) or (why := _foreign_inside(directory)):
        raise NotOurs(directory, why)
    shutil.rmtree(directory)
