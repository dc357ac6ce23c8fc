"""Declared source patches: apply exactly as declared, or fail naming file and pattern.

The tutorial patched upstream files with `str.replace` / `re.sub` at container start; when
upstream text moves those become silent no-ops and an unpatched trainer runs out of HBM an
hour into a paid run. Here every patch states how many matches it expects, and a different
count is an error before anything is built or run.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

import yaml

try:  # in the orchestrator: a full disk is the storage error (flows/core/safe_writes.py)
    from flows.core.safe_writes import write_text
except ImportError:  # in the image build this file is copied alone, without flows/
    def write_text(path: Path, text: str, what: str | None = None) -> None:
        path.write_text(text)

ORIGINAL_SUFFIX = ".tpurl-orig"
# The packages whose versions decide whether the CPU rehearsal proves a step of the real run
# (images/rehearsal/requirements.lock against the post-training image), by distribution name.
PARITY_PACKAGES = ("maxtext", "google-tunix", "jax", "vllm", "tpu-inference", "transformers",
                   "orbax-checkpoint")


@dataclass(frozen=True)
class PatchDeclaration:
    id: str
    file: str
    kind: Literal["literal", "regex"]
    pattern: str
    replacement: str
    expected_matches: int
    why: str
    # The versions (distribution → version) with which the rehearsal measured the patched
    # program failing; an image carrying all of them is refused before it is pushed.
    failed_in_rehearsal: dict[str, str] = field(default_factory=dict)
    failure: str = ""  # what failed, as measured


class PatchMismatch(RuntimeError):
    """The upstream file no longer looks like the declaration says (the image stage reports it
    as ``image/patch-mismatch``)."""

    def __init__(self, patch: PatchDeclaration, path: str, found: int) -> None:
        self.patch, self.path, self.found = patch, path, found
        super().__init__(
            f"patch {patch.id!r} expected {patch.expected_matches} match(es) of "
            f"{patch.kind} pattern {patch.pattern!r} in {path}, found {found}. Upstream changed: "
            "update the pattern and expected_matches in images/post-training/patches.yaml "
            "after reading the new file, or disable the patch in the profile with a reason "
            "(image.disabled_patches)."
        )


def load_declarations(path: Path) -> list[PatchDeclaration]:
    """The declarations in ``path``, read each call and parsed once per distinct text: the
    plan of one profile asks for them once per key it derives (about 30 times; each parse of
    patches.yaml took ~14 ms of pure-Python YAML, two thirds of `tpurl plan`'s CPU)."""
    return list(_parsed_declarations(str(path), path.read_text()))


@functools.lru_cache(maxsize=8)
def _parsed_declarations(path: str, text: str) -> tuple[PatchDeclaration, ...]:
    data = yaml.safe_load(text) or {}
    patches = [PatchDeclaration(**{**entry, "failed_in_rehearsal": {
        str(k): str(v) for k, v in (entry.get("failed_in_rehearsal") or {}).items()}})
        for entry in data.get("patches", [])]
    ids = [p.id for p in patches]
    if len(ids) != len(set(ids)):
        raise ValueError(f"{path}: patch ids must be unique, got {ids}")
    return tuple(patches)


def distribution_key(name: str) -> str:
    """PEP 503 normalised distribution name (``Orbax_Checkpoint`` → ``orbax-checkpoint``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def tracked_versions(packages: Mapping[str, str]) -> dict[str, str]:
    """The PARITY_PACKAGES among ``packages`` (any spelling of their names)."""
    have = {distribution_key(k): v for k, v in packages.items()}
    return {name: have[name] for name in PARITY_PACKAGES if name in have}


_GITHUB_ARCHIVE = re.compile(r"/archive/(?P<commit>[0-9a-f]{40})[.](?:zip|tar[.]gz)$")


def commit_of(direct_url_json: str | None) -> str | None:
    """Pure: the commit a distribution was installed from, by its PEP 610 direct_url.json: a
    VCS install's ``commit_id``, or a GitHub archive named by commit (MaxText 0.2.4's
    post_train_github_deps.txt installs tunix so); None for an index or wheel install."""
    try:
        record = json.loads(direct_url_json or "null")
    except ValueError:
        return None
    if not isinstance(record, dict):
        return None
    vcs = record.get("vcs_info")
    commit = vcs.get("commit_id") if isinstance(vcs, dict) else None
    if isinstance(commit, str) and re.fullmatch(r"[0-9a-f]{40}", commit):
        return commit
    found = _GITHUB_ARCHIVE.search(str(record.get("url", "")))
    return found["commit"] if found else None


def installed_versions() -> dict[str, str]:
    """What `pip freeze` lists here, read as pip reads it (importlib.metadata), a version
    installed from a commit written ``VERSION@COMMIT``: tunix's pyproject said 0.1.8 for
    hundreds of commits, and which one is what the rehearsal parity compares."""
    import importlib.metadata

    out = {}
    for dist in importlib.metadata.distributions():
        if name := dist.metadata["Name"]:
            commit = commit_of(dist.read_text("direct_url.json"))
            out[name] = f"{dist.version}@{commit}" if commit else dist.version
    return out


def measured_failure(patch: PatchDeclaration, packages: Mapping[str, str]) -> str | None:
    """Pure: why ``patch`` must not ship in an image with ``packages`` installed, when the
    rehearsal measured it failing with exactly those versions; None otherwise."""
    if not patch.failed_in_rehearsal:
        return None
    have = {distribution_key(k): v for k, v in packages.items()}
    if any(have.get(distribution_key(k)) != v for k, v in patch.failed_in_rehearsal.items()):
        return None
    same = ", ".join(f"{k}=={v}" for k, v in sorted(patch.failed_in_rehearsal.items()))
    return (f"patch {patch.id!r} failed in the rehearsal with {same}, the versions this image "
            f"carries ({patch.failure or 'see images/post-training/patches.yaml'}): disable it "
            f"(image.disabled_patches.{patch.id}) or use a base with other versions")


def enabled(patches: list[PatchDeclaration], disabled: dict[str, str]) -> list[PatchDeclaration]:
    return [p for p in patches if p.id not in disabled]


def plan_lines(declared: list[PatchDeclaration], disabled: dict[str, str]) -> list[str]:
    """What a plan says about the patches: one action per enabled patch (how many matches it
    expects), then one note per disabled patch with the profile's reason."""
    return [f"apply patch {p.id} to {p.file} ({p.expected_matches} match(es))"
            for p in enabled(declared, disabled)]


def disabled_notes(disabled: dict[str, str]) -> list[str]:
    return [f"patch {pid} DISABLED: {why}" for pid, why in disabled.items()]


def declarations_digest(patches: list[PatchDeclaration]) -> str:
    blob = json.dumps([asdict(p) for p in patches], sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()


def count_matches(text: str, patch: PatchDeclaration) -> int:
    if patch.kind == "literal":
        return text.count(patch.pattern)
    return len(re.findall(patch.pattern, text))


def apply_to_text(text: str, patch: PatchDeclaration, path: str = "<text>") -> str:
    """Pure: the patched text, or PatchMismatch when the match count differs."""
    found = count_matches(text, patch)
    if found != patch.expected_matches:
        raise PatchMismatch(patch, path, found)
    if patch.kind == "literal":
        return text.replace(patch.pattern, patch.replacement)
    return re.sub(patch.pattern, lambda _m: patch.replacement, text)


def apply_to_tree(root_for: dict[str, Path], patches: list[PatchDeclaration]) -> list[str]:
    """Patch files under their package roots, idempotently.

    The pristine file is kept beside the patched one (``*.tpurl-orig``) and every application
    starts from it, so re-running with a changed patch set never patches twice. All patches
    are checked before any file is written.
    """
    by_file: dict[Path, list[PatchDeclaration]] = {}
    for patch in patches:
        package = patch.file.split("/", 1)[0]
        if package not in root_for:
            raise FileNotFoundError(f"patch {patch.id!r}: package {package!r} not found")
        by_file.setdefault(root_for[package] / patch.file, []).append(patch)
    results: dict[Path, str] = {}
    for path, file_patches in by_file.items():
        original = path.with_name(path.name + ORIGINAL_SUFFIX)
        text = (original if original.exists() else path).read_text()
        for patch in file_patches:
            text = apply_to_text(text, patch, str(path))
        results[path] = text
    for path, text in results.items():
        original = path.with_name(path.name + ORIGINAL_SUFFIX)
        if not original.exists():
            write_text(original, path.read_text(), "a pristine copy of a patched file")
        write_text(path, text, "a patched file")
    return [str(p) for p in results]


def restore_tree(root_for: dict[str, Path], patches: list[PatchDeclaration]) -> None:
    """Put pristine files back (before a reinstall, or when a patch is disabled)."""
    for patch in patches:
        package = patch.file.split("/", 1)[0]
        if package not in root_for:
            continue
        path = root_for[package] / patch.file
        original = path.with_name(path.name + ORIGINAL_SUFFIX)
        if original.exists():
            write_text(path, original.read_text(), "a restored pristine file")
            original.unlink()
