"""Stage 1, image: the post-training image with the declared patches baked in.

On GKE this is a Docker build FROM the profile's base image (issue #3). In the rehearsal the
"image" is a pinned venv (images/rehearsal/requirements.lock) with the *same* patch
declarations applied to its site-packages, so a patch that no longer matches fails here too.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

from flows.config.profile import Profile
from flows.core.layout import HF_CHECK_LOCK, REHEARSAL_LOCK, Layout, image_key, patched_image_ref
from flows.core.patching import (
    apply_to_tree,
    count_matches,
    enabled,
    load_declarations,
    restore_tree,
)
from flows.core.paths import PATCHES_FILE, REPO_ROOT
from flows.core.stage import Stage, StageContext, StageOutput, StagePlan, WorkloadRun, fail
from flows.core.storage import file_uri, join

PATCHED_PACKAGES = ("tunix", "maxtext")


class ImageStage(Stage):
    name = "image"
    title = "Post-training image (patched)"

    def key(self, profile: Profile) -> str:
        return image_key(profile)

    def chip_hours(self, profile: Profile, wall_s: float) -> float:
        return 0.0  # built before the cluster exists

    def record_uri(self, layout: Layout) -> str:
        if layout.profile.backend == "local":
            return join(file_uri(layout.venv_dir()), "tpurl-lineage.json")
        return join(layout.root, "images", image_key(layout.profile), "tpurl-lineage.json")

    def plan(self, profile: Profile) -> StagePlan:
        layout = Layout(profile)
        patches = enabled(load_declarations(PATCHES_FILE), profile.image.disabled_patches)
        notes = [f"patch {pid} DISABLED: {why}" for pid, why in profile.image.disabled_patches.items()]
        applied = [f"apply patch {p.id} to {p.file} ({p.expected_matches} match(es))" for p in patches]
        if profile.backend == "local":
            venv, check = layout.venv_dir(), layout.hf_check_venv_dir()
            actions = [f"create venv {_rel(venv)} (Python {profile.local.venv_python})",
                       f"pip install -r {_rel(REHEARSAL_LOCK)}", *applied,
                       f"create venv {_rel(check)} (Python {profile.local.hf_check_python}) and "
                       f"pip install -r {_rel(HF_CHECK_LOCK)} (transformers + CPU torch, "
                       "to prove the export loads)"]
            outputs = {"image": f"venv:{_rel(venv)}"}
        else:
            repository = patched_image_ref(profile).rsplit(":", 1)[0]
            actions = [f"docker build FROM {profile.image.base} (pinned to its digest)", *applied,
                       f"docker push {repository}:tpurl-<content tag> (base digest + patches + "
                       "build files; skipped when that tag is already in the registry)"]
            outputs = {"image": f"{repository}@sha256:<pushed digest> (what the workloads run)"}
        return StagePlan(stage=self.name, title=self.title, key=self.key(profile),
                         inputs={"base": profile.image.base}, outputs=outputs,
                         actions=actions, notes=notes)

    def outputs_present(self, ctx: StageContext, record: Any) -> bool:
        if ctx.profile.backend != "local":
            return True
        return (_python(ctx.layout.venv_dir()).exists()
                and _python(ctx.layout.hf_check_venv_dir()).exists())

    def run(self, ctx: StageContext, upstream: dict[str, StageOutput]) -> list[WorkloadRun]:
        if ctx.profile.backend != "local":
            self._build_and_push(ctx)
            _ensure_record_bucket(ctx)
            return []
        assert ctx.profile.local is not None
        local, layout = ctx.profile.local, ctx.layout
        logs = join(file_uri(layout.venv_dir().parent), "tpurl-logs")
        runs = []
        venv, check = layout.venv_dir(), layout.hf_check_venv_dir()
        declared = load_declarations(PATCHES_FILE)
        if _python(venv).exists():
            restore_tree(_package_roots(venv), declared)  # reinstall over pristine files
        runs += _ensure_venv(ctx, "rehearsal", venv, local.venv_python, REHEARSAL_LOCK, logs)
        patches = enabled(declared, ctx.profile.image.disabled_patches)
        for pid, why in ctx.profile.image.disabled_patches.items():
            ctx.logger.warning("patch %s is DISABLED by the profile: %s", pid, why)
        try:
            patched = apply_to_tree(_package_roots(venv), patches)
        except Exception as exc:  # PatchMismatch names file and pattern
            raise fail(self.name, "a declared patch does not apply", str(exc),
                       "update images/post-training/patches.yaml to the new upstream text") from exc
        ctx.logger.info("patched %s", ", ".join(sorted(set(patched))))
        runs += _ensure_venv(ctx, "hf-check", check, local.hf_check_python, HF_CHECK_LOCK, logs)
        return runs

    def verify(self, ctx: StageContext) -> tuple[dict[str, str], dict[str, Any]]:
        if ctx.profile.backend != "local":
            details = ctx.scratch["image"]
            return {"image": details["image"]}, details
        venv = ctx.layout.venv_dir()
        probe = subprocess.run(
            [str(_python(venv)), "-c", "import json, importlib.metadata as m; print(json.dumps("
             "{p: m.version(p) for p in ('maxtext', 'google-tunix', 'jax', 'flax', 'orbax-checkpoint', "
             "'transformers')}))"], capture_output=True, text=True, check=False)
        if probe.returncode != 0:
            raise fail(self.name, "the rehearsal venv does not import", probe.stderr[-2000:],
                       f"delete {_rel(venv)} and run again to rebuild it")
        roots = _package_roots(venv)
        patches = enabled(load_declarations(PATCHES_FILE), ctx.profile.image.disabled_patches)
        for patch in patches:
            text = (roots[patch.file.split("/", 1)[0]] / patch.file).read_text()
            if count_matches(text, patch) != 0:
                raise fail(self.name, f"patch {patch.id} is not in effect", patch.file,
                           f"delete {_rel(venv)} and run again")
        details = {"versions": json.loads(probe.stdout), "patches": [p.id for p in patches],
                   "disabled_patches": dict(ctx.profile.image.disabled_patches)}
        return {"image": f"venv:{_rel(venv)}"}, details


    def _build_and_push(self, ctx: StageContext) -> None:
        """Docker build FROM the pinned base with the declared patches; push; keep the digest."""
        from flows.backends.gke.image import (
            ImageError,
            connect,
            ensure_image,
            request_from_profile,
            verify_image,
        )

        try:
            request = request_from_profile(ctx.profile)
            result = ensure_image(request, connect(), log=ctx.logger.info)
            # verify_image reads files from the image; only after a build (the base is GBs)
            details = (verify_image(connect(), result.ref, request.patches()) if result.built
                       else {"image": result.ref})
        except ImageError as exc:
            category = "infrastructure" if getattr(exc, "transient", False) or \
                type(exc).__name__ == "DockerUnavailable" else "user-error"
            raise fail(self.name, exc.category, str(exc), exc.resolution, category) from exc
        ctx.scratch["image"] = {**details, "built": result.built, "base": result.base,
                                "tagged": result.tagged, "patches": list(result.patches),
                                "disabled_patches": dict(ctx.profile.image.disabled_patches)}


def _ensure_record_bucket(ctx: StageContext) -> None:
    """The GKE lineage record lives in the profile's bucket, which on a fresh project only the
    infra stage (next) would create: the record write 404'd and the first run failed here.
    Create it the way infra does (profile's region, uniform access) or accept ours as is."""
    from flows.backends.gke.infra import clients
    from flows.backends.gke.infra.bucket import ensure_bucket
    from flows.backends.gke.infra.settings import settings_from_profile

    settings = settings_from_profile(ctx.profile)
    _, client = clients.default_clients(settings)
    if ensure_bucket(client, settings, None).created:
        ctx.logger.info("created gs://%s in %s for the lineage records", settings.bucket,
                        settings.region)


def _python(venv: Path) -> Path:
    return venv / "bin" / "python"


def _rel(path: Path) -> str:
    try:
        return str(path.relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


def _package_roots(venv: Path) -> dict[str, Path]:
    code = ("import importlib.util, json, pathlib; print(json.dumps({n: str(pathlib.Path("
            "importlib.util.find_spec(n).submodule_search_locations[0]).parent) for n in "
            f"{PATCHED_PACKAGES!r}}}))")
    out = subprocess.run([str(_python(venv)), "-c", code], capture_output=True, text=True,
                         check=True, cwd="/")
    return {name: Path(root) for name, root in json.loads(out.stdout).items()}


def _ensure_venv(ctx: StageContext, label: str, venv: Path, python_version: str, lock: Path,
                 logs: str) -> list[WorkloadRun]:
    from flows.backends.local.backend import LocalBackend

    backend = ctx.backend
    assert isinstance(backend, LocalBackend)
    runs = []
    marker = venv / "tpurl-installed-lock.txt"
    if marker.is_file() and marker.read_text() == lock.read_text() and _python(venv).exists():
        return runs
    if not _python(venv).exists():
        if venv.exists():
            shutil.rmtree(venv)
        python = shutil.which(f"python{python_version}") or f"python{python_version}"
        env = {"PYENV_VERSION": python_version}
        runs.append(backend.run_command(f"create-{label}-venv", [python, "-m", "venv", str(venv)],
                                        join(logs, f"create-{label}-venv.log"), env))
    runs.append(backend.run_command(
        f"install-{label}", [str(_python(venv)), "-m", "pip", "install", "--no-input",
                             "--disable-pip-version-check", "-r", str(lock)],
        join(logs, f"install-{label}.log")))
    marker.write_text(lock.read_text())
    return runs
