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

from flows.backends.gke.image.context import SOURCES, build_context, content_tag
from flows.backends.gke.image.daemon import connect
from flows.backends.gke.image.errors import ImageBuildFailed
from flows.backends.gke.image.registry import pin_base, push, remote_digest
from flows.core.patching import PatchDeclaration, enabled, load_declarations
from flows.core.paths import PATCHES_FILE
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
class ImageResult:
    ref: str            # repository@sha256:... (what workloads run)
    tagged: str         # repository:content-tag
    digest: str
    base: str           # the base as built FROM (pinned)
    built: bool         # False: the content tag was already in the registry
    patches: tuple[str, ...]
    seconds: float


def ensure_image(request: ImageRequest, client: docker.DockerClient | None = None,
                 backoff: RetryPolicy = DEFAULT_BACKOFF, on_retry: OnRetry | None = None,
                 log: Log | None = None) -> ImageResult:
    started = time.monotonic()
    client = client or connect()
    patches = request.patches()
    pinned, base_digest = pin_base(client, request.base, backoff, on_retry)
    context = build_context(patches, request.sources)
    tag = content_tag(base_digest, patches, context)
    tagged = f"{request.repository}:{tag}"
    ids = tuple(p.id for p in patches)

    def result(digest: str, built: bool) -> ImageResult:
        return ImageResult(ref=f"{request.repository}@{digest}", tagged=tagged, digest=digest,
                           base=pinned, built=built, patches=ids,
                           seconds=time.monotonic() - started)

    existing = remote_digest(client, tagged, backoff, on_retry)
    if existing is not None:
        if log:
            log(f"{tagged} is already in the registry ({existing}); not building")
        return result(existing, built=False)
    buildargs = {"BASE_IMAGE": pinned, "BASE_NAME": request.base, "BASE_DIGEST": base_digest,
                 "CONTENT_TAG": tag, "PATCH_IDS": ",".join(ids)}  # labels: see the Dockerfile
    with tempfile.TemporaryDirectory(prefix="tpurl-image-") as tmp:
        _build(client, context.write(Path(tmp)), tagged, buildargs, log)
    digest = push(client, request.repository, tag, backoff, on_retry, log)
    return result(digest, built=True)


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
