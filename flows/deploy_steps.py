"""prefect.yaml steps around prefect-docker's build/push of the flow image.

Why these exist: prefect-docker 0.7.4's ``build_docker_image`` tags with the given tag (or the
build time) and ``push_docker_image`` returns only ``image_name``/``tag``/``image``
(prefect_docker/deployments/steps.py, ``PushDockerImageResult``): no digest. A Kubernetes
deployment that names a moving tag runs whatever the tag points at when the pod starts. So:

- ``flow_image_tag`` (before the build) checks ``TPURL_FLOW_IMAGE`` and computes the tag from
  content: the files the Dockerfile COPYs, as the build context holds them (the root
  ``.dockerignore`` applied the way docker-py applies it when it sends the context), the
  Dockerfile itself and the build args (base image reference, CLOUD_TOOLS). Same content,
  same tag: a rerun rebuilds nothing new and pushes no new tag.
- ``pushed_digest`` (after the push) asks the registry for the manifest digest of that tag
  and returns ``image_by_digest`` (``repo@sha256:...``).
- ``pin_pool_image`` (after ``pushed_digest``) writes that reference into the Kubernetes
  pool's base job template as a fixed value. Prefect validates a run's job variables against
  the pool's variables schema but cannot tell them from the deployment's, so an ``image``
  variable would let anyone who may create a flow run start a pod of any image as the flow's
  service account. The shipped template has no ``image`` variable (``additionalProperties``
  false: the API refuses a run naming one); the pinned digest also rules out an older build.

prefect.yaml references their outputs as ``{{ <step id>.<key> }}``: prefect's ``run_steps``
stores each step's returned dict under its ``id`` (prefect/deployments/steps/core.py), and
``prefect deploy`` templates the deployment with those outputs.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
import shlex
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

IMAGE_ENV = "TPURL_FLOW_IMAGE"
DEFAULT_BASE = "python:3.12-slim-bookworm"
DEFAULT_DOCKERFILE = "images/flow/Dockerfile"
IMAGE_FIX = (f"fix: export {IMAGE_ENV}=REGION-docker.pkg.dev/PROJECT/tpurl/tpurl-flow (the "
             "repository the Kubernetes pool pulls from; no tag: the tag is computed from "
             "content), or 127.0.0.1:5000/tpurl-flow with scripts/docker-services.sh locally, "
             "then run `prefect deploy` again")
FLOW_CONTAINER = "prefect-job"
_REPOSITORY = re.compile(r"^[a-z0-9]+([._-][a-z0-9]+)*(:[0-9]+)?(/[a-z0-9]+([._-][a-z0-9]+)*)*$")


class FlowImageError(ValueError):
    """A flow-image setting `prefect deploy` cannot build with: the message names the
    setting and the fix."""


def check_repository(image_name: str) -> str:
    """The image repository from TPURL_FLOW_IMAGE, refused before anything is built."""
    name = image_name.strip()
    if not name:
        raise FlowImageError(f"{IMAGE_ENV} is not set: `prefect deploy` builds and pushes the "
                             f"flow image for the Kubernetes deployments and needs its "
                             f"repository. {IMAGE_FIX}")
    if "@" in name or ":" in name.rsplit("/", 1)[-1]:
        raise FlowImageError(f"{IMAGE_ENV}={name} holds a tag or digest. {IMAGE_FIX}")
    if not _REPOSITORY.match(name):
        raise FlowImageError(f"{IMAGE_ENV}={name} is not an image repository (lowercase "
                             f"letters, digits, . _ - and /). {IMAGE_FIX}")
    return name


def build_args(base_image: str, cloud_tools: str) -> dict[str, str]:
    """The Dockerfile's build args; an unset environment variable arrives as ''."""
    tools = cloud_tools.strip() or "1"
    if tools not in ("0", "1"):
        raise FlowImageError(f"TPURL_FLOW_CLOUD_TOOLS={cloud_tools} must be 0 or 1. fix: 1 "
                             "installs gcloud, terraform and gcluster (production); 0 leaves "
                             "them out")
    return {"PYTHON_IMAGE": base_image.strip() or DEFAULT_BASE, "CLOUD_TOOLS": tools}


def copy_sources(dockerfile_text: str) -> list[str]:
    """The context paths of every COPY/ADD without --from (shell form; continuation lines
    joined), in order."""
    joined = re.sub(r"\\\n", " ", dockerfile_text)
    sources: list[str] = []
    for line in joined.splitlines():
        words = shlex.split(line.strip(), comments=True) if line.strip() else []
        if not words or words[0].upper() not in ("COPY", "ADD"):
            continue
        args = words[1:]
        if any(a.startswith("--from") for a in args):
            continue
        paths = [a for a in args if not a.startswith("--")]
        sources.extend(paths[:-1])
    return sources


def context_files(root: Path, dockerfile: str) -> list[str]:
    """The files docker-py puts in the build context (docker/api/build.py reads the root
    .dockerignore that way; docker/utils/build.py exclude_paths applies it)."""
    from docker.utils.build import exclude_paths

    ignore = root / ".dockerignore"
    patterns: list[str] = []
    if ignore.is_file():
        patterns = [line.strip() for line in ignore.read_text().splitlines()
                    if line.strip() and not line.strip().startswith("#")]
    return sorted(p for p in exclude_paths(str(root), patterns, dockerfile=dockerfile)
                  if (root / p).is_file())


def copied(files: Iterable[str], sources: Iterable[str]) -> list[str]:
    """The context files a COPY of `sources` takes (a source is a file or a directory)."""
    wanted = [s.strip("/").removeprefix("./") for s in sources]
    return [f for f in files if any(s in (".", "") or f == s or f.startswith(s + "/")
                                    for s in wanted)]


def content_tag(dockerfile_text: str, files: Mapping[str, bytes], args: Mapping[str, str]) -> str:
    """A tag that changes when, and only when, what the build sees changes."""
    digest = hashlib.sha256()
    for part in (dockerfile_text.encode(), *(f"{k}={v}".encode() for k, v in sorted(args.items()))):
        digest.update(len(part).to_bytes(8, "big") + part)
    for name in sorted(files):
        digest.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
    return "c-" + digest.hexdigest()[:20]


def flow_image_tag(image_name: str, base_image: str = "", cloud_tools: str = "",
                   dockerfile: str = DEFAULT_DOCKERFILE, context: str = ".") -> dict[str, Any]:
    """prefect.yaml build step: ``image_name``, content ``tag`` and ``buildargs`` for
    prefect_docker's build_docker_image.

    A bad setting ends `prefect deploy` with its message alone: prefect's ``run_steps`` wraps
    any Exception of a step in StepExecutionError, which the CLI prints as a traceback
    (prefect/deployments/steps/core.py, prefect/cli/_utilities.py); a SystemExit passes both.
    """
    try:
        name = check_repository(image_name)
        args = build_args(base_image, cloud_tools)
    except FlowImageError as exc:
        print(f"Refused: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
    root = Path(context).resolve()
    text = (root / dockerfile).read_text()
    taken = copied(context_files(root, dockerfile), copy_sources(text))
    tag = content_tag(text, {f: (root / f).read_bytes() for f in taken}, args)
    return {"image_name": name, "tag": tag, "image": f"{name}:{tag}", "buildargs": args}


def by_digest(image_name: str, digest: str) -> str:
    if not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
        raise FlowImageError(f"the registry gave {digest!r} for {image_name}, not a sha256 digest")
    return f"{image_name}@{digest}"


def pushed_digest(image_name: str, tag: str) -> dict[str, str]:
    """prefect.yaml push step (after push_docker_image): the digest the registry serves for
    ``image_name:tag`` (the daemon's distribution inspect, i.e. the registry's manifest), as
    ``image_by_digest``."""
    from prefect.utilities.dockerutils import docker_client

    with docker_client() as client:
        data = client.images.get_registry_data(f"{image_name}:{tag}")
    digest = str(data.id)
    return {"image_name": image_name, "digest": digest, "image_by_digest": by_digest(image_name, digest)}


def pinned_template(template: Mapping[str, Any], image: str) -> dict[str, Any]:
    """``template`` with its flow container's image fixed to ``image`` and no ``image``
    variable; nothing else changes. The container is found by name, not by a ``{{ image }}``
    placeholder, so a later deploy replaces the digest an earlier one pinned."""
    pinned = copy.deepcopy(dict(template))
    try:
        containers = pinned["job_configuration"]["job_manifest"]["spec"]["template"]["spec"][
            "containers"]
        flow = next(c for c in containers if c.get("name") == FLOW_CONTAINER)
    except (KeyError, TypeError, StopIteration):
        raise FlowImageError(
            f"the work pool's base job template has no container named {FLOW_CONTAINER!r} "
            "under job_configuration.job_manifest.spec.template.spec.containers. fix: `prefect "
            "work-pool update tpurl-kubernetes --base-job-template "
            "deployments/work-pool/kubernetes-base-job-template.json`, then deploy again"
        ) from None
    flow["image"] = image
    variables = pinned.get("variables") or {}
    (variables.get("properties") or {}).pop("image", None)
    if "image" in (variables.get("required") or []):
        variables["required"] = [name for name in variables["required"] if name != "image"]
    if re.search(r"\{\{\s*image\s*\}\}", json.dumps(pinned["job_configuration"])):
        raise FlowImageError(
            "the work pool's base job template renders the image variable outside the "
            f"{FLOW_CONTAINER!r} container, where a run could set it. fix: `prefect work-pool "
            "update tpurl-kubernetes --base-job-template "
            "deployments/work-pool/kubernetes-base-job-template.json`, then deploy again")
    return pinned


def check_pinnable(repository: str, image_by_digest: str) -> str:
    """The reference to pin: ``TPURL_FLOW_IMAGE``'s repository by a sha256 digest."""
    name = check_repository(repository)
    if not re.fullmatch(re.escape(name) + r"@sha256:[0-9a-f]{64}", image_by_digest.strip()):
        raise FlowImageError(f"the image to pin, {image_by_digest!r}, is not {IMAGE_ENV}={name} "
                             f"by sha256 digest. fix: pin what pushed_digest returned "
                             f"(image_by_digest: \"{{{{ flow-image-digest.image_by_digest }}}}\")")
    return image_by_digest.strip()


def pin_pool_image(repository: str, image_by_digest: str,
                   work_pool: str = "tpurl-kubernetes") -> dict[str, str]:
    """prefect.yaml push step (after ``pushed_digest``): fixes the flow image by digest in
    ``work_pool``'s base job template, through the API `prefect deploy` talks to.

    Refusals end `prefect deploy` with their message alone, before the pool is touched (see
    ``flow_image_tag`` for why a SystemExit)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolUpdate
    from prefect.exceptions import ObjectNotFound

    try:
        image = check_pinnable(repository, image_by_digest)
        with get_client(sync_client=True) as client:
            try:
                pool = client.read_work_pool(work_pool)
            except ObjectNotFound:
                from flows.backends.gke.flow_pools import pool_template_shown

                raise FlowImageError(
                    f"work pool {work_pool!r} does not exist. fix: `prefect work-pool create "
                    f"{work_pool} --type kubernetes --base-job-template "
                    f"{pool_template_shown(work_pool)}`, then deploy again") from None
            template = pinned_template(pool.base_job_template, image)
            if template != pool.base_job_template:
                client.update_work_pool(work_pool, WorkPoolUpdate(base_job_template=template))
    except FlowImageError as exc:
        print(f"Refused: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
    return {"work_pool": work_pool, "image": image}
