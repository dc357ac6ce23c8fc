"""Apply the enabled patch declarations inside the image build (``RUN python3 ...``).

Runs on the base image's own Python, so every declared file is found the way the trainer
will import it (``importlib.util.find_spec``): site-packages for tunix, /deps/src for maxtext
in tpu_post_training. A file that moved or a pattern that no longer matches its declared
count stops the build with the message of :class:`patching.PatchMismatch`, which names the
file and the pattern; nothing is half-patched (all patches are checked before any write).

``patching.py`` beside this script is ``flows/core/patching.py``, copied into the build context at
build time: one implementation for the image and the rehearsal venv. Standard library and
PyYAML only (MaxText already needs PyYAML).

Usage: python3 apply_patches.py DIR   (DIR holds patches.yaml and enabled-patches.txt;
writes DIR/applied.json: which file each patch changed, for the post-push check)
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from patching import PatchMismatch, apply_to_tree, installed_versions, load_declarations

MARKER = "tpurl: PATCH MISMATCH:"


def package_root(name: str) -> Path:
    """The directory that holds package ``name``, as this image's importer sees it."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"tpurl: package {name!r} is not importable with {sys.executable} in "
                         "this image, but patches.yaml declares files under it; check the base "
                         "image (image.base) or disable those patches with a reason")
    return Path(next(iter(spec.submodule_search_locations))).parent


def main(directory: Path) -> int:
    declared = load_declarations(directory / "patches.yaml")
    wanted = (directory / "enabled-patches.txt").read_text().split()
    unknown = sorted(set(wanted) - {p.id for p in declared})
    if unknown:
        raise SystemExit(f"tpurl: enabled-patches.txt names undeclared patches {unknown}")
    patches = [p for p in declared if p.id in wanted]
    packages = sorted({p.file.split("/", 1)[0] for p in patches})
    roots = {name: package_root(name) for name in packages}
    try:
        apply_to_tree(roots, patches)
    except PatchMismatch as exc:
        print(f"{MARKER} {exc}", file=sys.stderr, flush=True)
        return 1
    applied = []
    for patch in patches:
        path = roots[patch.file.split("/", 1)[0]] / patch.file
        applied.append({"id": patch.id, "path": str(path),
                        "sha256": hashlib.sha256(path.read_bytes()).hexdigest()})
        print(f"tpurl: applied {patch.id} to {path}", flush=True)
    disabled = sorted({p.id for p in declared} - set(wanted))
    for pid in disabled:
        print(f"tpurl: patch {pid} DISABLED by the profile", flush=True)
    # what `pip freeze` would list, read the way pip reads it; tunix as 0.1.8@<commit>
    installed = installed_versions()
    manifest = {"patches": applied, "disabled": disabled, "python": sys.version.split()[0],
                "packages": dict(sorted(installed.items()))}
    (directory / "applied.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    sys.exit(main(Path(sys.argv[1])))
