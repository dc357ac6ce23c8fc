"""The rehearsal's "image": pinned venvs built from lock files, with the declared patches.

The MaxText venv (images/rehearsal/requirements.lock, every file checked against its hash;
tunix from the image's GitHub commit or the wheel of it: tunix_source.py) gets the same
patch declarations the Docker build applies (images/post-training/patches.yaml), reinstalled
over pristine copies so a changed patch set never double-patches; a second venv
(transformers + CPU torch) exists only to prove the export loads. The lineage record lives
inside the MaxText venv, so deleting the venv reruns the step.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flows.backends.local.installer import install_command, installer_name
from flows.backends.local.program_group import Started
from flows.backends.local.tunix_source import (
    TUNIX_GITHUB_FILE,
    WHEEL_DIR_ENV,
    NoTunixSource,
    TunixSource,
    load_pin,
    lock_without_tunix,
    resolve_source,
)
from flows.common.failure_codes import Failure
from flows.common.ownership import OWNER_MARKER, claim, owned, remove_owned
from flows.common.paths import HF_CHECK_LOCK, PATCHES_FILE, REHEARSAL_LOCK, REPO_ROOT
from flows.core.backend import StageWork, WorkloadRun
from flows.core.failures import user_error
from flows.core.lineage import LineageRecord
from flows.core.patching import (
    PatchMismatch,
    apply_to_tree,
    count_matches,
    disabled_notes,
    enabled,
    load_declarations,
    plan_lines,
    restore_tree,
)
from flows.core.safe_writes import write_text
from flows.core.stage import StageContext
from flows.core.storage import file_uri, join

if TYPE_CHECKING:
    from flows.backends.local.backend import LocalBackend
    from flows.config.profile import Profile

PATCHED_PACKAGES = ("tunix", "maxtext")
# The patch set the venv's files carry now, beside them: a venv is shared by every local
# profile that names it, and another profile's image stage may re-patch it while this run
# is between programs (see venv_patch_mismatch).
PATCH_SET_FILE = "tpurl-patch-set.json"
VERSIONS_PROBE = ("import json, importlib.metadata as m; print(json.dumps({p: m.version(p) for p in "
                  "('maxtext', 'google-tunix', 'jax', 'flax', 'orbax-checkpoint', 'transformers')}))")


class LocalImage:
    content_outputs: tuple[str, ...] = ()  # the venvs are checked by import, not by hash

    def __init__(self, backend: LocalBackend) -> None:
        self.backend = backend
        self.profile, self.layout = backend.profile, backend.layout

    def plan(self) -> StageWork:
        profile, layout = self.profile, self.layout
        assert profile.local is not None
        venv, check = layout.venv_dir(), layout.hf_check_venv_dir()
        patches = plan_lines(load_declarations(PATCHES_FILE), profile.image.disabled_patches)
        pin = load_pin(REHEARSAL_LOCK)
        actions = [f"create venv {_rel(venv)} (Python {profile.local.venv_python})",
                   f"{installer_name()} install --require-hashes -r {_rel(REHEARSAL_LOCK)}, "
                   f"with {pin.describe()} as the image installs it (--no-deps): from GitHub "
                   f"where reachable, else {pin.wheel_name} from ${WHEEL_DIR_ENV} (sha256 "
                   f"{pin.wheel_sha256[:12]}… checked first)", *patches,
                   f"create venv {_rel(check)} (Python {profile.local.hf_check_python}) and "
                   f"{installer_name()} install -r {_rel(HF_CHECK_LOCK)} (transformers + CPU torch, "
                   "to prove the export loads)"]
        return StageWork(inputs={"base": profile.image.base},
                        outputs={"image": f"venv:{_rel(venv)}"}, actions=actions,
                        notes=disabled_notes(profile.image.disabled_patches))

    def record_uri(self) -> str:
        return join(file_uri(self.layout.venv_dir()), "tpurl-lineage.json")

    def present(self, ctx: StageContext, record: LineageRecord) -> bool:
        """Both venvs, and the rehearsal one carrying this profile's patches: the record is
        one per venv, so another profile's image stage (another patch set), or one that
        stopped while re-patching, leaves a record this profile still matches over files
        it never patched."""
        venv = self.layout.venv_dir()
        if not (_python(venv).exists() and _python(self.layout.hf_check_venv_dir()).exists()):
            return False
        if why := venv_patch_mismatch(self.profile, venv):
            ctx.logger.warning("image: %s; patching it again", why)
            return False
        return True

    def leftover_dirs(self) -> list[str]:
        return []  # a half-built venv is repaired in place (tpurl-installed-lock.txt)

    def exclusive(self, ctx: StageContext) -> contextlib.AbstractContextManager[None]:
        """The whole stage (is it done? install, patch, verify, record) under the venvs'
        install lock: two runs on one machine (two local profiles, a test beside a
        rehearsal) would otherwise install into one venv at once, or restore pristine files
        under the other's running programs. The one that waited then finds the record of
        what the other built, and skips."""
        return install_lock(self.layout.venv_dir(), ctx.logger)

    def run(self, ctx: StageContext) -> list[WorkloadRun]:
        local, layout = self.profile.local, self.layout
        assert local is not None
        logs = join(file_uri(layout.venv_dir().parent), "tpurl-logs")
        venv, check = layout.venv_dir(), layout.hf_check_venv_dir()
        _refuse_foreign(venv, "local.venv")  # before restore_tree rewrites files in it
        _refuse_foreign(check, "local.hf_check_venv")
        declared = load_declarations(PATCHES_FILE)
        tunix = None if _installed(venv, REHEARSAL_LOCKS) else self._tunix_source(ctx)
        if _python(venv).exists():
            _record_patch_set(venv, None)  # in flux until the patches below are applied
            restore_tree(_package_roots(venv), declared)  # reinstall over pristine files
        # the two venvs share nothing: installed at once (flows/backends/local/program_group.py)
        installs = self.backend.run_together([
            lambda started: self._ensure_venv("rehearsal", venv, local.venv_python,
                                              REHEARSAL_LOCKS, logs, tunix, started),
            lambda started: self._ensure_venv("hf-check", check, local.hf_check_python,
                                              (HF_CHECK_LOCK,), logs, on_start=started)])
        runs: list[WorkloadRun] = []
        for outcome in installs:
            if isinstance(outcome, BaseException):
                raise outcome
            runs += outcome
        patches = enabled(declared, self.profile.image.disabled_patches)
        for pid, why in self.profile.image.disabled_patches.items():
            ctx.logger.warning("patch %s is DISABLED by the profile: %s", pid, why)
        try:
            patched = apply_to_tree(_all_package_roots(venv), patches)
        except PatchMismatch as exc:  # names the file and the pattern
            raise user_error("image", "a declared patch does not apply", str(exc),
                             "update images/post-training/patches.yaml to the new upstream text",
                             code=Failure.IMAGE_PATCH_MISMATCH) from exc
        ctx.logger.info("patched %s", ", ".join(sorted(set(patched))))
        _record_patch_set(venv, [p.id for p in patches])
        return runs

    def verify(self, ctx: StageContext) -> tuple[dict[str, str], dict[str, Any]]:
        venv = self.layout.venv_dir()
        probe = subprocess.run([str(_python(venv)), "-c", VERSIONS_PROBE], capture_output=True,
                               text=True, check=False)
        if probe.returncode != 0:
            raise user_error("image", "the rehearsal venv does not import", probe.stderr[-2000:],
                       f"delete {_rel(venv)} and run again to rebuild it")
        roots = _all_package_roots(venv)
        patches = enabled(load_declarations(PATCHES_FILE), self.profile.image.disabled_patches)
        for patch in patches:
            text = (roots[patch.file.split("/", 1)[0]] / patch.file).read_text()
            if count_matches(text, patch) != 0:
                raise user_error("image", f"patch {patch.id} is not in effect", patch.file,
                                 f"delete {_rel(venv)} and run again")
        versions, pin = json.loads(probe.stdout), load_pin(REHEARSAL_LOCK)
        if versions.get("google-tunix") != pin.version:
            raise user_error("image", f"the rehearsal venv has google-tunix "
                             f"{versions.get('google-tunix')}, not {pin.describe()}",
                             _rel(venv), f"delete {_rel(venv)} and run again")
        details = {"versions": versions, "tunix": pin.describe(),
                   "patches": [p.id for p in patches],
                   "disabled_patches": dict(self.profile.image.disabled_patches)}
        return {"image": f"venv:{_rel(venv)}"}, details

    def _tunix_source(self, ctx: StageContext) -> TunixSource:
        """Decided before the venv is touched: neither way open is a user error naming both."""
        pin = load_pin(REHEARSAL_LOCK)
        try:
            source = resolve_source(pin)
        except NoTunixSource as exc:
            raise user_error("image", "the image's tunix cannot be installed", str(exc),
                             f"make GitHub reachable, or export {WHEEL_DIR_ENV}=<folder with "
                             f"{pin.wheel_name}>", code=Failure.IMAGE_TUNIX_SOURCE) from exc
        ctx.logger.info("image: installing %s", source.describe(pin))
        return source

    def _ensure_venv(self, label: str, venv: Path, python_version: str, locks: tuple[Path, ...],
                     logs: str, tunix: TunixSource | None = None,
                     on_start: Started | None = None) -> list[WorkloadRun]:
        """Install the locks into ``venv``. A directory is only ever removed when it carries
        our marker (flows/common/ownership.py): :func:`_refuse_foreign` ran first."""
        runs: list[WorkloadRun] = []
        marker = venv / "tpurl-installed-lock.txt"
        if _installed(venv, locks):
            return runs
        if venv.exists() and marker.is_file():
            # a changed lock is a new environment: installed over the old one without
            # resolving, a package the lock dropped or renamed (tensorflow → tensorflow-cpu)
            # would stay beside its replacement
            remove_owned(venv)
        if not _python(venv).exists():
            remove_owned(venv)  # ours, half-made (no python yet): NotOurs for any other
            claim(venv)  # the marker goes in before the venv's files
            python = shutil.which(f"python{python_version}") or f"python{python_version}"
            runs.append(self.backend.run_command(
                f"create-{label}-venv", [python, "-m", "venv", *_without_pip(), str(venv)],
                join(logs, f"create-{label}-venv.log"), {"PYENV_VERSION": python_version},
                on_start=on_start))
        for name, (argv, env) in _install_steps(_python(venv), venv, locks[0], tunix):
            runs.append(self.backend.run_command(f"install-{label}{name}", argv,
                                                 join(logs, f"install-{label}{name}.log"), env,
                                                 on_start=on_start))
        write_text(marker, _marker_text(locks), "the rehearsal venv's install marker")
        return runs


def _without_pip() -> list[str]:
    """uv installs from outside the venv: ensurepip's copy of pip in it would be seconds of a
    fresh clone's image stage for nothing (pip installs need it, so they keep it)."""
    return ["--without-pip"] if installer_name() == "uv" else []


# The rehearsal venv is the lock plus the tunix commit: a new commit is a new venv.
REHEARSAL_LOCKS = (REHEARSAL_LOCK, TUNIX_GITHUB_FILE)


def _marker_text(locks: tuple[Path, ...]) -> str:
    return "".join(lock.read_text() for lock in locks)


def _installed(venv: Path, locks: tuple[Path, ...]) -> bool:
    marker = venv / "tpurl-installed-lock.txt"
    return marker.is_file() and marker.read_text() == _marker_text(locks) \
        and _python(venv).exists()


def _install_steps(python: Path, venv: Path, lock: Path, tunix: TunixSource | None
                   ) -> list[tuple[str, tuple[list[str], dict[str, str]]]]:
    """The hf-check lock as it is; the rehearsal lock hash-checked, with tunix from the
    wheel folder (find-links: the lock's hash picks that file) or, without its block, then
    the GitHub commit by itself with --no-deps (no installer takes a git requirement in
    --require-hashes mode)."""
    if tunix is None:
        return [("", install_command(python, lock))]
    if tunix.kind == "wheel":
        return [("", install_command(python, lock, hashes=True, find_links=tunix.wheel_dir))]
    rest = venv / "tpurl-lock-without-tunix.txt"
    write_text(rest, lock_without_tunix(lock.read_text()), "the lock without tunix")
    return [("", install_command(python, rest, hashes=True)),
            ("-tunix", install_command(python, TUNIX_GITHUB_FILE))]


def _refuse_foreign(venv: Path, field: str) -> None:
    """A venv directory that exists without our marker is someone else's: neither removed
    nor installed into."""
    if not (venv.exists() or venv.is_symlink()) or owned(venv):
        return
    raise user_error("image", f"{field} names a directory tpurl did not create",
                     f"{_rel(venv)} exists without the marker tpurl writes into the venvs it "
                     f"creates ({OWNER_MARKER}); it is neither deleted nor installed into",
                     f"point {field} at a new path (e.g. .venvs/rehearsal-2), or move "
                     f"{_rel(venv)} away yourself if it is an old venv you no longer need",
                     code=Failure.IMAGE_VENV_NOT_OURS)


@contextlib.contextmanager
def install_lock(venv: Path, logger: Any) -> Iterator[None]:
    """An exclusive lock beside the venvs (released by the kernel if its holder dies)."""
    path = venv.parent / ".tpurl-install.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            logger.info("waiting for another run's install of the venvs (pid %s) to finish",
                        handle.read().strip() or "unknown")
            fcntl.flock(handle, fcntl.LOCK_EX)
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def enabled_patch_ids(profile: Profile) -> list[str]:
    return sorted(p.id for p in enabled(load_declarations(PATCHES_FILE),
                                        profile.image.disabled_patches))


def _record_patch_set(venv: Path, ids: list[str] | None) -> None:
    write_text(venv / PATCH_SET_FILE, json.dumps({"patches": None if ids is None else sorted(ids)}),
               "the rehearsal venv's patch set")


def venv_patch_mismatch(profile: Profile, venv: Path) -> str | None:
    """Why the venv no longer carries this profile's patches, or None.

    The image stage's record says what it applied when it ran; a program started later in
    the same run would otherwise run, silently, with whatever patch set another profile
    naming the same venv applied since (or with half of it, while that one is applying).
    A venv without the file (built before it existed, or not by the image stage) is not
    judged."""
    path = venv / PATCH_SET_FILE
    try:
        carried = json.loads(path.read_text())["patches"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    wanted = enabled_patch_ids(profile)
    if carried is None:
        return f"{_rel(venv)} is being re-patched by another run, or one stopped while doing so"
    if sorted(carried) != wanted:
        return (f"{_rel(venv)} now carries patches {', '.join(carried) or 'none'}; this run's "
                f"image stage applied {', '.join(wanted) or 'none'}")
    return None


def _python(venv: Path) -> Path:
    return venv / "bin" / "python"


def _rel(path: Path) -> str:
    try:
        return str(path.relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


def _package_roots(venv: Path) -> dict[str, Path]:
    """Where the venv's interpreter finds each patched package (site-packages), for the
    packages it has: a venv whose install was stopped (Ctrl-C, a killed run) may have an
    interpreter and none or one of them yet, and the rerun's restore must still work; the
    patch step after the install needs all of them (``_all_package_roots``)."""
    code = ("import importlib.util, json, pathlib; specs = {n: importlib.util.find_spec(n) "
            f"for n in {PATCHED_PACKAGES!r}}}; print(json.dumps({{n: str(pathlib.Path("
            "s.submodule_search_locations[0]).parent) for n, s in specs.items() if s and "
            "s.submodule_search_locations}))")
    out = subprocess.run([str(_python(venv)), "-c", code], capture_output=True, text=True,
                         check=True, cwd="/")
    return {name: Path(root) for name, root in json.loads(out.stdout).items()}


def _all_package_roots(venv: Path) -> dict[str, Path]:
    """``_package_roots`` once the install is done: a package it lacks is the install's
    failure, named here rather than as a file-not-found in the patch step."""
    roots = _package_roots(venv)
    if missing := [name for name in PATCHED_PACKAGES if name not in roots]:
        raise RuntimeError(f"the venv {venv} has no {', '.join(missing)} after its install")
    return roots
