"""The image stage on GKE: a Docker build FROM the pinned base with the declared patches,
pushed under a content tag and handed on by digest (build.py does the work).

The lineage record lives in the profile's bucket, which on a fresh project only the infra
stage would create; the step creates it the way infra does (profile's region, uniform access)
so the first run does not fail writing its record.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from flows.core.backend import StepPlan, WorkloadRun
from flows.core.failures import StageFailed
from flows.core.layout import image_key, patched_image_ref
from flows.core.lineage import LineageRecord
from flows.core.patching import disabled_notes, load_declarations, plan_lines
from flows.core.paths import PATCHES_FILE
from flows.core.stage import StageContext
from flows.core.storage import join

if TYPE_CHECKING:
    from flows.backends.gke.backend import GkeBackend


class GkeImage:
    content_outputs: tuple[str, ...] = ()

    def __init__(self, backend: GkeBackend) -> None:
        self.profile, self.layout = backend.profile, backend.layout

    def plan(self) -> StepPlan:
        profile = self.profile
        repository = patched_image_ref(profile).rsplit(":", 1)[0]
        patches = plan_lines(load_declarations(PATCHES_FILE), profile.image.disabled_patches)
        actions = [f"create the Artifact Registry repository of {repository} (if missing)",
                   f"docker build FROM {profile.image.base} (pinned to its digest)", *patches,
                   f"docker push {repository}:tpurl-<content tag> (base digest + patches + "
                   "build files; skipped when that tag is already in the registry)"]
        return StepPlan(inputs={"base": profile.image.base},
                        outputs={"image": f"{repository}@sha256:<pushed digest> (what the "
                                          "workloads run)"},
                        actions=actions, notes=disabled_notes(profile.image.disabled_patches))

    def record_uri(self) -> str:
        return join(self.layout.root, "images", image_key(self.profile), "tpurl-lineage.json")

    def present(self, ctx: StageContext, record: LineageRecord) -> bool:
        return True  # the content tag is immutable; build.py skips when it is pushed already

    def leftover_dirs(self) -> list[str]:
        return []

    def run(self, ctx: StageContext) -> list[WorkloadRun]:
        from flows.backends.gke.image import (
            ImageError,
            connect,
            ensure_image,
            request_from_profile,
            verify_image,
        )

        try:
            request = request_from_profile(self.profile)
            self._ensure_repository(request.repository, ctx)
            result = ensure_image(request, connect(), log=ctx.logger.info)
            # verify_image reads files from the image; only after a build (the base is GBs)
            details = (verify_image(connect(), result.ref, request.patches()) if result.built
                       else {"image": result.ref})
        except ImageError as exc:  # each carries its diagnosis (category, code, fix)
            raise StageFailed("image", exc.diagnosis) from exc
        ctx.scratch["image"] = {**details, "built": result.built, "base": result.base,
                                "tagged": result.tagged, "patches": list(result.patches),
                                "disabled_patches": dict(self.profile.image.disabled_patches)}
        self._ensure_record_bucket(ctx)
        return []

    def verify(self, ctx: StageContext) -> tuple[dict[str, str], dict[str, Any]]:
        details = ctx.scratch["image"]
        return {"image": details["image"]}, details

    def _ensure_repository(self, repository: str, ctx: StageContext) -> None:
        from flows.backends.gke.image.repository import ensure_repository
        from flows.backends.gke.infra import clients
        from flows.backends.gke.infra.preflight_access import ar_repository
        from flows.backends.gke.infra.settings import settings_from_profile

        if ar_repository(repository) is None:
            return  # another registry: nothing to create, no Google credentials needed
        apis, _ = clients.default_clients(settings_from_profile(self.profile))
        ensure_repository(apis, repository, ctx.logger.info)

    def _ensure_record_bucket(self, ctx: StageContext) -> None:
        from flows.backends.gke.infra import clients
        from flows.backends.gke.infra.bucket import ensure_bucket
        from flows.backends.gke.infra.settings import settings_from_profile

        gke = self.profile.gke
        assert gke is not None
        settings = settings_from_profile(self.profile)
        _, client = clients.default_clients(settings)
        if ensure_bucket(client, settings, None).created:
            ctx.logger.info("created gs://%s in %s for the lineage records", gke.bucket,
                            gke.region)
