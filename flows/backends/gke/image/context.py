"""The build context of the patched image, and the content tag derived from it.

The tag is a hash of everything that decides the image's bytes, so "is this tag in the
registry?" is the same question as "was this exact image already built?":

- the base image's *digest* (not its tag: ``tpu_post_training:0.2.4`` can be re-pushed),
- the enabled patch declarations (:func:`flows.core.patching.declarations_digest`; disabling a
  patch in the profile changes the tag),
- every file of the build context by content: Dockerfile, the apply script, the copy of
  ``flows/core/patching.py`` it imports, patches.yaml, the list of enabled patch ids, and
  the wheel lock with its install script (``wheels/``).

The wheels themselves (wheels.py) are not hashed again: one enters the context only when its
sha256 is the lock's, so the lock decides their bytes, and a rerun can ask the registry for
the tag without having the wheels on the machine (:meth:`BuildContext.with_wheels` adds them
just before a build).

``flows.core.layout.image_key`` hashes the base *reference* and the declarations (it must stay
pure for ``tpurl plan``); the content tag extends it with the digest and the build files,
which need I/O or exist only at build time. ``TAG_SCHEME`` is part of the hash so a change
of this scheme never reuses an old tag.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from flows.backends.gke.image.wheels import LOCK_FILE, context_wheels
from flows.common.paths import IMAGES_DIR, PATCHES_FILE, REPO_ROOT
from flows.core.patching import PatchDeclaration, declarations_digest

TAG_SCHEME = 2  # 2: the wheels/ of W&B logging
POST_TRAINING_DIR = IMAGES_DIR / "post-training"
PATCHING_MODULE = REPO_ROOT / "flows" / "core" / "patching.py"
ENABLED_FILE = "enabled-patches.txt"
WHEELS_LOCK = "wheels/wandb.lock"

# name in the build context -> source in the repository. The patch tool imports
# ``patching`` from its own directory: one implementation for the image and the rehearsal.
SOURCES: Mapping[str, Path] = {
    "Dockerfile": POST_TRAINING_DIR / "Dockerfile",
    "apply_patches.py": POST_TRAINING_DIR / "apply_patches.py",
    "check_patches.py": POST_TRAINING_DIR / "check_patches.py",  # the Cloud Build check step
    "patching.py": PATCHING_MODULE,
    "patches.yaml": PATCHES_FILE,
    WHEELS_LOCK: LOCK_FILE,  # the wheels beside them: BuildContext.with_wheels
    "wheels/install_wheels.py": POST_TRAINING_DIR / "install_wheels.py",
}


@dataclass(frozen=True)
class BuildContext:
    """The exact bytes sent to the daemon, by file name: ``files`` (hashed into the content
    tag) and the lock-checked ``wheels`` (files on disk, decided by the lock in ``files``)."""

    files: Mapping[str, bytes]
    wheels: Mapping[str, Path] = field(default_factory=dict)

    def file_digests(self) -> dict[str, str]:
        return {name: hashlib.sha256(data).hexdigest() for name, data in sorted(self.files.items())}

    def with_wheels(self, wheels: Mapping[str, Path]) -> BuildContext:
        return BuildContext(self.files, dict(wheels))

    def _all(self) -> list[tuple[str, bytes]]:
        return sorted([*self.files.items(),
                       *((name, path.read_bytes()) for name, path in self.wheels.items())])

    def tarball(self) -> bytes:
        """The context as a gzipped tar (what Cloud Build fetches from GCS as its source):
        fixed owner, mode and time, so the same context is the same bytes."""
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
            for name, data in self._all():
                info = tarfile.TarInfo(name)
                info.size, info.mode, info.mtime = len(data), 0o644, 0
                tar.addfile(info, io.BytesIO(data))
        return buffer.getvalue()

    def write(self, directory: Path) -> Path:
        directory.mkdir(parents=True, exist_ok=True)
        for name, data in self._all():
            (directory / name).parent.mkdir(parents=True, exist_ok=True)
            (directory / name).write_bytes(data)
        return directory


def enabled_ids_text(patches: Sequence[PatchDeclaration]) -> str:
    """Pure: the enabled-patches file (declaration order, one id per line)."""
    return "".join(f"{p.id}\n" for p in patches)


def build_context(patches: Sequence[PatchDeclaration],
                  sources: Mapping[str, Path] = SOURCES) -> BuildContext:
    files = {name: path.read_bytes() for name, path in sources.items()}
    files[ENABLED_FILE] = enabled_ids_text(patches).encode()
    return BuildContext(files)


def content_tag(base_digest: str, patches: Sequence[PatchDeclaration],
                context: BuildContext) -> str:
    """Pure: the image tag for this base digest, patch set and build context."""
    blob = json.dumps({"scheme": TAG_SCHEME, "base": base_digest,
                       "patches": declarations_digest(list(patches)),
                       "files": context.file_digests()}, sort_keys=True).encode()
    return "tpurl-" + hashlib.sha256(blob).hexdigest()[:20]


def context_for_build(patches: Sequence[PatchDeclaration],
                      sources: Mapping[str, Path] = SOURCES) -> BuildContext:
    """The context a build sends: :func:`build_context` plus the wheels its lock names (found
    or downloaded, sha256-checked: wheels.py). Only a build needs them, never the tag."""
    context = build_context(patches, sources)
    lock = sources.get(WHEELS_LOCK)
    return context.with_wheels(context_wheels(lock)) if lock is not None else context
