"""The image stage on GKE: the patched image built FROM the pinned base (Docker SDK or Cloud
Build, by ``image.builder``: builder.py), pushed under a content tag, handed on by digest.

The lineage record is the registry itself (a :class:`~flows.core.backend.RecordKeeper`):
the content tag hashes the base digest, the enabled patches and every build file, and it is
pushed only after the patched files were checked (build.py, cloudbuild_spec.py). So "is the
tag there?" answers what a record file would, and the stage needs no bucket before infra
creates one. The record's ``run_id`` is the pushed digest, so the fingerprint downstream
stages record stays the same on every rerun and changes only when the image does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from flows.common.paths import PATCHES_FILE
from flows.core.backend import StageWork, WorkloadRun
from flows.core.failures import StageFailed
from flows.core.layout import image_key, patched_image_ref
from flows.core.lineage import LineageRecord
from flows.core.patching import disabled_notes, load_declarations, plan_lines
from flows.core.stage import StageContext

if TYPE_CHECKING:
    from flows.backends.gke.backend import GkeBackend
    from flows.backends.gke.image.build import ImageRequest, Lookup

LOOKUP = "image-lookup"  # ctx.scratch: what done() learned from the registry, reused by run()


class GkeImage:
    content_outputs: tuple[str, ...] = ()

    def __init__(self, backend: GkeBackend) -> None:
        self.profile, self.gke, self.layout = backend.profile, backend.gke, backend.layout

    def plan(self) -> StageWork:
        profile = self.profile
        repository = patched_image_ref(profile).rsplit(":", 1)[0]
        patches = plan_lines(load_declarations(PATCHES_FILE), profile.image.disabled_patches)
        how = {"auto": "docker build (a Docker daemon where the flow runs; Cloud Build "
                       "otherwise)",
               "docker": "docker build (Docker daemon)",
               "cloud-build": "Cloud Build: docker build"}[profile.image.builder]
        actions = [f"create the Artifact Registry repository of {repository} (if missing)",
                   f"{how} FROM {profile.image.base} (pinned to its digest)", *patches,
                   "check the patched files in the built image",
                   f"push {repository}:tpurl-<content tag> (base digest + patches + "
                   "build files; skipped when that tag is already in the registry, which is "
                   "the stage's record)"]
        return StageWork(inputs={"base": profile.image.base},
                        outputs={"image": f"{repository}@sha256:<pushed digest> (what the "
                                          "workloads run)"},
                        actions=actions, notes=disabled_notes(profile.image.disabled_patches))

    def record_uri(self) -> str:
        repository = patched_image_ref(self.profile).rsplit(":", 1)[0]
        return f"{repository}:tpurl-<content tag> (the registry keeps the image's record)"

    def present(self, ctx: StageContext, record: LineageRecord) -> bool:
        return True  # read_record found the tag in the registry just now

    def leftover_dirs(self) -> list[str]:
        return []

    # --- the record lives in the registry (RecordKeeper) -----------------------------------

    def read_record(self, ctx: StageContext) -> LineageRecord | None:
        found = self._lookup(ctx)
        if found.existing is None:
            ctx.logger.info("image: %s is not in the registry yet; building", found.tagged)
            return None
        ref = f"{self._request().repository}@{found.existing}"
        return self._record({"image": ref, "built": False, "base": found.pinned,
                             "tagged": found.tagged, **self._patch_details()}, found.existing)

    def store_record(self, ctx: StageContext, record: LineageRecord) -> LineageRecord:
        digest = ctx.scratch["image"]["image"].rsplit("@", 1)[1]
        return record.model_copy(update={"run_id": digest})  # the pushed tag is the record

    def _record(self, details: dict[str, Any], digest: str) -> LineageRecord:
        return LineageRecord(stage="image", key=image_key(self.profile), inputs={},
                             outputs={"image": details["image"]}, details=details,
                             run_id=digest)

    def run(self, ctx: StageContext) -> list[WorkloadRun]:
        from flows.backends.gke.image import ImageError

        try:
            request = self._request()
            self._ensure_repository(request.repository, ctx)
            result = self._ensure(request, ctx)
        except ImageError as exc:  # each carries its diagnosis (category, code, fix)
            raise StageFailed("image", exc.diagnosis) from exc
        ctx.scratch["image"] = {**result.checked, "image": result.ref, "built": result.built,
                                "base": result.base, "tagged": result.tagged,
                                **self._patch_details()}
        ctx.scratch["image"]["rehearsal_parity"] = self._parity(ctx, result.checked)
        return []

    def _parity(self, ctx: StageContext, checked: Mapping[str, Any]) -> list[str]:
        """The image's recorded versions against the rehearsal's lock, logged and shown on
        the run page (both builders record them: verify.py reads the image's manifest, the
        Cloud Build check step returns them as its build step output)."""
        from flows.backends.gke.image.parity import parity_lines, read_rehearsal_versions
        from flows.core.patching import enabled
        from flows.runpage.artifacts import publish_parity

        lock = read_rehearsal_versions()
        packages = checked.get("packages")
        lines = parity_lines(self.profile.image.base, lock,
                             dict(packages) if isinstance(packages, Mapping) else None,
                             enabled(load_declarations(PATCHES_FILE),
                                     self.profile.image.disabled_patches))
        for line in lines:
            ctx.logger.info("image: %s", line.strip())
        publish_parity(self.profile.name, lines)
        return lines

    def verify(self, ctx: StageContext) -> tuple[dict[str, str], dict[str, Any]]:
        details = ctx.scratch["image"]
        return {"image": details["image"]}, details

    def _patch_details(self) -> dict[str, Any]:
        request = self._request()
        return {"patches": [p.id for p in request.patches()],
                "disabled_patches": dict(self.profile.image.disabled_patches)}

    def _request(self) -> ImageRequest:
        from flows.backends.gke.image import request_from_profile

        return request_from_profile(self.profile)

    def _builder(self, ctx: StageContext) -> str:
        from flows.backends.gke.image.builder import builder_for

        if "image-builder" not in ctx.scratch:
            ctx.scratch["image-builder"] = builder_for(self.profile)
            ctx.logger.info("image: building with %s (image.builder: %s)",
                            ctx.scratch["image-builder"], self.profile.image.builder)
        return str(ctx.scratch["image-builder"])

    def _lookup(self, ctx: StageContext) -> Lookup:
        from flows.backends.gke.image import ImageError, connect
        from flows.backends.gke.image.build import lookup_docker

        if LOOKUP not in ctx.scratch:
            try:
                if self._builder(ctx) == "docker":
                    ctx.scratch[LOOKUP] = lookup_docker(self._request(), connect())
                else:
                    from flows.backends.gke.image.cloudbuild import lookup
                    from flows.backends.gke.image.registry_http import RegistryApi

                    token = self._cloud_clients().registry_token
                    ctx.scratch[LOOKUP] = lookup(self._request(), RegistryApi(token))
            except ImageError as exc:
                raise StageFailed("image", exc.diagnosis) from exc
        return ctx.scratch[LOOKUP]

    def _cloud_clients(self) -> Any:
        from flows.backends.gke.image import cloudbuild

        if not hasattr(self, "_clients"):
            self._clients = cloudbuild.default_clients(self.gke.project)
        return self._clients

    def _ensure(self, request: ImageRequest, ctx: StageContext) -> Any:
        from flows.backends.gke.image import connect, ensure_image

        found = self._lookup(ctx)
        if self._builder(ctx) == "docker":
            return ensure_image(request, connect(), log=ctx.logger.info, found=found)
        from flows.backends.gke.image.cloudbuild import CloudBuildTarget, ensure_image_cloud_build

        gke = self.gke
        return ensure_image_cloud_build(request, CloudBuildTarget(gke.project, gke.region),
                                        self._cloud_clients(), log=ctx.logger.info, found=found)

    def _ensure_repository(self, repository: str, ctx: StageContext) -> None:
        from flows.backends.gke.image.repository import ensure_repository
        from flows.backends.gke.infra import clients
        from flows.backends.gke.infra.preflight.access import ar_repository
        from flows.backends.gke.infra.settings import settings_from_profile

        if ar_repository(repository) is None:
            return  # another registry: nothing to create, no Google credentials needed
        apis, _ = clients.default_clients(settings_from_profile(self.profile))
        ensure_repository(apis, repository, ctx.logger.info)
