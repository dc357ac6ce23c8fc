"""Build the patched image FROM the pinned base and push it, unless its content tag is there.

The order is the point: pin the base to a digest, derive the tag from content, ask the
registry, and only then build. A rerun with nothing changed costs one digest lookup for the
base and one for the tag, instead of pulling a multi-GB TPU image to find nothing to do.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import docker
from docker.errors import APIError

from flows.backends.gke.image.context import SOURCES, build_context, content_tag, context_for_build
from flows.backends.gke.image.daemon import connect
from flows.backends.gke.image.errors import ImageBuildFailed
from flows.backends.gke.image.registry_daemon import pin_base, push, remote_digest
from flows.common.paths import PATCHES_FILE
from flows.core.patching import PatchDeclaration, enabled, load_declarations
from flows.core.retry import REGISTRY, OnRetry, RetryPolicy

MISMATCH_MARKER = "tpurl: PATCH MISMATCH:"
LOG_TAIL_LINES = 30
DEFAULT_BACKOFF = REGISTRY

Log = Callable[[str], None]


@dataclass(frozen=True)
class ImageRequest:
    """What to build: the profile's ``image`` section plus where to push."""

    base: str
    repository: str
    disabled_patches: Mapping[str, str] = field(default_factory=dict)
    patches_file: Path = PATCHES_FILE
    sources: Mapping[str, Path] = field(default_factory=lambda: dict(SOURCES))

    def patches(self) -> list[PatchDeclaration]:
        declared = load_declarations(self.patches_file)
        unknown = sorted(set(self.disabled_patches) - {p.id for p in declared})
        if unknown:
            raise ValueError(f"image.disabled_patches names undeclared patch(es) {unknown}; "
                             f"declared: {[p.id for p in declared]}")
        return enabled(declared, dict(self.disabled_patches))


@dataclass(frozen=True)
class Lookup:
    """What the registry says before anything is built (the same for done() and run()):
    the base pinned to its digest, the content tag, and that tag's digest if it is pushed."""

    pinned: str
    base_digest: str
    tag: str
    tagged: str
    existing: str | None


@dataclass(frozen=True)
class ImageResult:
    ref: str            # repository@sha256:... (what workloads run)
    tagged: str         # repository:content-tag
    digest: str
    base: str           # the base as built FROM (pinned)
    built: bool         # False: the content tag was already in the registry
    patches: tuple[str, ...]
    seconds: float
    checked: Mapping[str, object] = field(default_factory=dict)  # verify_image's details


def lookup_docker(request: ImageRequest, client: docker.DockerClient,
                  backoff: RetryPolicy = DEFAULT_BACKOFF, on_retry: OnRetry | None = None) -> Lookup:
    """The registry questions of a build, asked through the daemon (registry_daemon.py)."""
    patches = request.patches()
    pinned, base_digest = pin_base(client, request.base, backoff, on_retry)
    tag = content_tag(base_digest, patches, build_context(patches, request.sources))
    tagged = f"{request.repository}:{tag}"
    return Lookup(pinned, base_digest, tag, tagged, remote_digest(client, tagged, backoff, on_retry))


def ensure_image(request: ImageRequest, client: docker.DockerClient | None = None,
                 backoff: RetryPolicy = DEFAULT_BACKOFF, on_retry: OnRetry | None = None,
                 log: Log | None = None, found: Lookup | None = None) -> ImageResult:
    """Build, check the patched files in the local image, then push: a content tag in the
    registry always names a checked image (the image stage's record relies on it)."""
    from flows.backends.gke.image.verify import verify_image

    started = time.monotonic()
    client = client or connect()
    patches = request.patches()
    found = found or lookup_docker(request, client, backoff, on_retry)
    ids = tuple(p.id for p in patches)

    def result(digest: str, built: bool, checked: Mapping[str, object]) -> ImageResult:
        return ImageResult(ref=f"{request.repository}@{digest}", tagged=found.tagged,
                           digest=digest, base=found.pinned, built=built, patches=ids,
                           seconds=time.monotonic() - started, checked=checked)

    if found.existing is not None:
        if log:
            log(f"{found.tagged} is already in the registry ({found.existing}); not building")
        return result(found.existing, built=False, checked={})
    buildargs = {"BASE_IMAGE": found.pinned, "BASE_NAME": request.base,
                 "BASE_DIGEST": found.base_digest, "CONTENT_TAG": found.tag,
                 "PATCH_IDS": ",".join(ids)}  # labels: see the Dockerfile
    context = context_for_build(patches, request.sources)  # the wheels: only for a build
    with tempfile.TemporaryDirectory(prefix="tpurl-image-") as tmp:
        _build(client, context.write(Path(tmp)), found.tagged, buildargs, log)
    checked = verify_image(client, found.tagged, patches)
    digest = push(client, request.repository, found.tag, backoff, on_retry, log)
    return result(digest, built=True, checked=checked)


def _build(client: docker.DockerClient, directory: Path, tagged: str, buildargs: dict[str, str],
           log: Log | None) -> None:
    lines: list[str] = []
    try:
        # network none: the patch step must not depend on anything but the base and context.
        stream = client.api.build(path=str(directory), tag=tagged, buildargs=buildargs,
                                  rm=True, forcerm=True, decode=True,
                                  network_mode="none")
        for event in stream:
            if "stream" in event:
                for line in str(event["stream"]).splitlines():
                    lines.append(line)
                    if log and line.strip():
                        log(line)
            if "error" in event or "errorDetail" in event:
                message = str(event.get("error") or event["errorDetail"].get("message"))
                raise ImageBuildFailed(message, _tail(lines), mismatch_message(lines))
    except APIError as exc:
        raise ImageBuildFailed(str(exc.explanation or exc), _tail(lines),
                               mismatch_message(lines)) from exc


def mismatch_message(lines: list[str]) -> str | None:
    """Pure: the patch tool's own mismatch message from the build output, if it printed one."""
    for line in lines:
        if MISMATCH_MARKER in line:
            return line.split(MISMATCH_MARKER, 1)[1].strip()
    return None


def _tail(lines: list[str]) -> str:
    return "\n".join(lines[-LOG_TAIL_LINES:])
