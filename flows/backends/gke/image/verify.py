"""Read the patched files back out of the pushed image and check them.

The check opens the image's filesystem (a created, never started container and the archive
API) instead of running Python in it: the real image is built for TPU hosts and may not run
where the flow runs, but its files can always be read. The build's patch tool leaves a
manifest (``/tpurl/patches/applied.json``) that says which file each patch changed, so the
check needs no knowledge of where the image keeps its packages.
"""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Sequence
from typing import Any

import docker
from docker.errors import ImageNotFound

from flows.backends.gke.image.errors import ImageError
from flows.common.failure_codes import Failure
from flows.core.patching import PatchDeclaration, count_matches, measured_failure, tracked_versions

MANIFEST = "/tpurl/patches/applied.json"


class PatchNotInImage(ImageError):
    code = Failure.IMAGE_PATCH_NOT_IN_EFFECT
    fix = "rebuild the image (delete the tag in the registry) and run again"


class PatchMeasuredFailing(ImageError):
    """The image carries the versions with which the rehearsal measured a patch failing."""

    code = Failure.IMAGE_PATCH_MEASURED_FAILING


def read_file(container: Any, path: str) -> bytes:
    """One regular file from a container's filesystem."""
    stream, _stat = container.get_archive(path)
    with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
        member = tar.next()
        if member is None or not member.isfile():
            raise ImageError(f"{path} is not a regular file in the image")
        extracted = tar.extractfile(member)
        assert extracted is not None
        return extracted.read()


def check_patched(manifest: dict[str, Any], files: dict[str, str],
                  patches: Sequence[PatchDeclaration]) -> dict[str, str]:
    """Pure: every expected patch applied, none left matching; returns patch id -> path."""
    applied = {entry["id"]: entry["path"] for entry in manifest["patches"]}
    expected = [p.id for p in patches]
    if sorted(applied) != sorted(expected):
        raise PatchNotInImage(f"the image applied {sorted(applied)}, expected {sorted(expected)}")
    for patch in patches:
        text = files[applied[patch.id]]
        if count_matches(text, patch) != 0 or patch.replacement not in text:
            raise PatchNotInImage(f"patch {patch.id!r} is not in effect in {applied[patch.id]}")
    return applied


def verify_image(client: docker.DockerClient, ref: str,
                 patches: Sequence[PatchDeclaration]) -> dict[str, Any]:
    """Pull ``ref`` if absent, then check its patched files; returns details for lineage."""
    try:
        client.images.get(ref)
    except ImageNotFound:
        client.images.pull(ref)
    container = client.containers.create(ref, command=["/tpurl-never-started"],
                                         network_mode="none")
    try:
        manifest = json.loads(read_file(container, MANIFEST))
        paths = sorted({entry["path"] for entry in manifest["patches"]})
        files = {path: read_file(container, path).decode() for path in paths}
    finally:
        container.remove(force=True)
    applied = check_patched(manifest, files, patches)
    packages = dict(manifest.get("packages") or {})
    refuse_measured_failures(patches, packages)
    return {"image": ref, "patched_files": applied, "python": manifest.get("python", ""),
            "packages": tracked_versions(packages)}


def refuse_measured_failures(patches: Sequence[PatchDeclaration],
                             packages: dict[str, str]) -> None:
    """Pure: raise before the push when a patch would ship with the versions the rehearsal
    measured it failing with (the same rule the Cloud Build check step applies in-image)."""
    for patch in patches:
        if (why := measured_failure(patch, packages)) is not None:
            error = PatchMeasuredFailing(why)
            error.fix = (f"set image.disabled_patches.{patch.id} with the reason, or "
                         "build from a base whose versions differ; nothing was pushed")
            raise error
