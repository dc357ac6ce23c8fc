"""The build context of the patched image, and the content tag derived from it.

The tag is a hash of everything that decides the image's bytes, so "is this tag in the
registry?" is the same question as "was this exact image already built?":

- the base image's *digest* (not its tag: ``tpu_post_training:0.2.4`` can be re-pushed),
- the enabled patch declarations (:func:`flows.core.patching.declarations_digest`; disabling a
  patch in the profile changes the tag),
- every file of the build context by content: Dockerfile, the apply script, the copy of
  ``flows/core/patching.py`` it imports, patches.yaml and the list of enabled patch ids.

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
from dataclasses import dataclass
from pathlib import Path

from flows.common.paths import IMAGES_DIR, PATCHES_FILE, REPO_ROOT
from flows.core.patching import PatchDeclaration, declarations_digest

TAG_SCHEME = 1
POST_TRAINING_DIR = IMAGES_DIR / "post-training"
PATCHING_MODULE = REPO_ROOT / "flows" / "core" / "patching.py"
ENABLED_FILE = "enabled-patches.txt"

# name in the build context -> source in the repository. The patch tool imports
# ``patching`` from its own directory: one implementation for the image and the rehearsal.
SOURCES: Mapping[str, Path] = {
    "Dockerfile": POST_TRAINING_DIR / "Dockerfile",
    "apply_patches.py": POST_TRAINING_DIR / "apply_patches.py",
    "check_patches.py": POST_TRAINING_DIR / "check_patches.py",  # the Cloud Build check step
    "patching.py": PATCHING_MODULE,
    "patches.yaml": PATCHES_FILE,
}


@dataclass(frozen=True)
class BuildContext:
    """The exact bytes sent to the daemon, by file name."""

    files: Mapping[str, bytes]

    def file_digests(self) -> dict[str, str]:
        return {name: hashlib.sha256(data).hexdigest() for name, data in sorted(self.files.items())}

    def tarball(self) -> bytes:
        """The context as a gzipped tar (what Cloud Build fetches from GCS as its source):
        fixed owner, mode and time, so the same context is the same bytes."""
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
            for name, data in sorted(self.files.items()):
                info = tarfile.TarInfo(name)
                info.size, info.mode, info.mtime = len(data), 0o644, 0
                tar.addfile(info, io.BytesIO(data))
        return buffer.getvalue()

    def write(self, directory: Path) -> Path:
        directory.mkdir(parents=True, exist_ok=True)
        for name, data in self.files.items():
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
