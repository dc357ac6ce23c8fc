"""Check, inside the built image, that every enabled patch is in effect (``python3 ... DIR``).

Why in the image: the Cloud Build path has no Docker daemon on the flow's side to read the
image's files back (flows/backends/gke/image/verify.py does that on the Docker path), so the
build runs this as a step in the image it just built, before ``images:`` pushes it. A failing
check fails the build, so a tag in the registry always names a checked image.

The rule is the one of ``flows.backends.gke.image.verify.check_patched``: the patches applied
are exactly the enabled ones, no pattern matches any more, every replacement is present. It
then prints the image's versions of the rehearsal-parity packages (what `pip freeze` says)
and refuses a patch the rehearsal measured failing with exactly those versions. On Cloud
Build it also writes them, with the patched files, as JSON to ``$BUILDER_OUTPUT/output``: the
service keeps that file as the step's entry of ``Build.results.build_step_outputs`` (the
first 50 KB; cloudbuild_v1 types/cloudbuild.py ``Results``), so the versions reach the
image's record (flows/backends/gke/image/cloudbuild_spec.py ``checked_from_outputs``), not
only the build log.
Standard library plus ``patching.py`` beside this script (a copy of flows/core/patching.py).

Usage: python3 check_patches.py DIR   (DIR holds applied.json, patches.yaml, enabled-patches.txt)
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from patching import (
    count_matches,
    installed_versions,
    load_declarations,
    measured_failure,
    tracked_versions,
)

MARKER = "tpurl: PATCH NOT IN EFFECT:"
MEASURED = "tpurl: PATCH MEASURED FAILING:"


def main(directory: Path) -> int:
    declared = {p.id: p for p in load_declarations(directory / "patches.yaml")}
    wanted = (directory / "enabled-patches.txt").read_text().split()
    applied = {e["id"]: e["path"] for e in json.loads((directory / "applied.json").read_text())["patches"]}
    if sorted(applied) != sorted(wanted):
        print(f"{MARKER} the image applied {sorted(applied)}, expected {sorted(wanted)}", flush=True)
        return 1
    for patch_id in wanted:
        patch, path = declared[patch_id], applied[patch_id]
        text = Path(path).read_text()
        if count_matches(text, patch) != 0 or patch.replacement not in text:
            print(f"{MARKER} patch {patch_id!r} is not in effect in {path}", flush=True)
            return 1
        print(f"tpurl: {patch_id} in effect in {path}", flush=True)
    packages = installed_versions()  # a commit-installed one as VERSION@COMMIT
    for name, version in tracked_versions(packages).items():
        print(f"tpurl: package {name}=={version}", flush=True)
    for patch_id in wanted:
        if (why := measured_failure(declared[patch_id], packages)) is not None:
            print(f"{MEASURED} {why}", flush=True)
            return 1
    if output := os.environ.get("BUILDER_OUTPUT"):
        summary = {"patched_files": {i: applied[i] for i in wanted},
                   "python": sys.version.split()[0], "packages": tracked_versions(packages)}
        Path(output, "output").write_text(json.dumps(summary, sort_keys=True))
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    sys.exit(main(Path(sys.argv[1])))
