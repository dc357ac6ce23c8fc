"""The declared patches against the real upstream files of the pinned versions."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from flows.common.paths import PATCHES_FILE
from flows.core.patching import (
    PatchDeclaration,
    PatchMismatch,
    apply_to_text,
    apply_to_tree,
    count_matches,
    load_declarations,
    restore_tree,
)
from tests.support.upstream_wheels import image_tunix_wheel, pypi_wheel


@pytest.fixture(scope="session")
def upstream_tree(tmp_path_factory) -> Path:
    """site-packages-like tree holding the real files: maxtext 0.2.4 from PyPI (pip download,
    cached), tunix at the commit the post-training image installs."""
    root = tmp_path_factory.mktemp("site-packages")
    for package, wheel_path in (("maxtext", pypi_wheel("maxtext==0.2.4")),
                                ("tunix", image_tunix_wheel())):
        with zipfile.ZipFile(wheel_path) as wheel:
            for member in wheel.namelist():
                if member.startswith(f"{package}/") and member.endswith(".py"):
                    wheel.extract(member, root)
    return root


def test_every_declaration_matches_upstream_exactly(upstream_tree: Path):
    for patch in load_declarations(PATCHES_FILE):
        text = (upstream_tree / patch.file).read_text()
        assert count_matches(text, patch) == patch.expected_matches, patch.id
        patched = apply_to_text(text, patch, patch.file)
        assert count_matches(patched, patch) == 0
        assert patch.replacement in patched


def test_tree_patching_is_idempotent_and_reversible(upstream_tree: Path, tmp_path: Path):
    import shutil

    tree = tmp_path / "tree"
    shutil.copytree(upstream_tree, tree)
    roots = {"maxtext": tree, "tunix": tree}
    patches = load_declarations(PATCHES_FILE)
    adafactor = next(p for p in patches if p.id == "maxtext-adafactor")
    apply_to_tree(roots, patches)
    once = (tree / adafactor.file).read_text()
    apply_to_tree(roots, patches)  # a second run starts from the kept original
    assert (tree / adafactor.file).read_text() == once
    assert "optax.adafactor(learning_rate=learning_rate)" in once
    restore_tree(roots, patches)
    for patch in patches:
        assert (tree / patch.file).read_text() == (upstream_tree / patch.file).read_text()


def test_patching_a_hard_linked_install_leaves_the_other_link_pristine(upstream_tree: Path,
                                                                       tmp_path: Path):
    """uv installs the rehearsal venv as hard links into its cache (installer.py): a patch
    or a restore that wrote through the link would patch the cache and every later venv."""
    import os
    import shutil

    cache, venv = tmp_path / "uv-cache", tmp_path / "venv"
    shutil.copytree(upstream_tree, cache)
    shutil.copytree(cache, venv, copy_function=os.link)
    roots = {"maxtext": venv, "tunix": venv}
    patches = load_declarations(PATCHES_FILE)
    apply_to_tree(roots, patches)
    restore_tree(roots, patches)
    apply_to_tree(roots, patches)
    for patch in patches:
        assert (cache / patch.file).read_text() == (upstream_tree / patch.file).read_text()
        assert count_matches((venv / patch.file).read_text(), patch) == 0
    assert not list(cache.rglob("*.tpurl-orig"))


def test_a_moved_pattern_fails_loudly_naming_file_and_pattern(upstream_tree: Path, tmp_path):
    import shutil

    tree = tmp_path / "tree"
    shutil.copytree(upstream_tree, tree)
    sampler = tree / "tunix/generate/vllm_sampler.py"
    sampler.write_text(sampler.read_text().replace("reshard_chunk_size: Optional[int] = None",
                                                   "reshard_chunk_size: int | None = None"))
    before = {p: (tree / p).read_text() for p in ("tunix/generate/vllm_sampler.py",
                                                  "maxtext/trainers/post_train/rl/utils_rl.py")}
    with pytest.raises(PatchMismatch) as caught:
        apply_to_tree({"maxtext": tree, "tunix": tree}, load_declarations(PATCHES_FILE))
    message = str(caught.value)
    assert "vllm_sampler.py" in message and "reshard_chunk_size: Optional[int] = None" in message
    assert "found 0" in message
    # checked before writing: nothing was half-patched
    assert {p: (tree / p).read_text() for p in before} == before


def test_more_matches_than_declared_is_an_error_too():
    patch = PatchDeclaration("x", "a.py", "literal", "foo", "bar", 1, "why")
    with pytest.raises(PatchMismatch, match="found 2"):
        apply_to_text("foo foo", patch)


def test_regex_replacement_is_taken_literally():
    patch = PatchDeclaration("x", "a.py", "regex", r"optax[.]adamw[(][^)]+[)]",
                             r"optax.adafactor(learning_rate=lr)\1", 1, "why")
    assert apply_to_text("o = optax.adamw(lr, b1=0.9)", patch) == \
        r"o = optax.adafactor(learning_rate=lr)\1"


def test_the_image_build_runs_the_patch_tool_without_the_flows_package(tmp_path: Path) -> None:
    """The image's build context holds patching.py and apply_patches.py alone
    (flows/backends/gke/image/context.py SOURCES): the pair must import and apply there,
    where `flows` does not exist."""
    from flows.backends.gke.image.context import SOURCES

    for name in ("patching.py", "apply_patches.py", "check_patches.py"):
        (tmp_path / name).write_bytes(SOURCES[name].read_bytes())
    target = tmp_path / "site" / "pkg.py"
    target.parent.mkdir()
    target.write_text("before\n")
    probe = ("import sys; sys.modules['flows'] = None; sys.path.insert(0, sys.argv[1]); "
             "import patching; import apply_patches; import check_patches; "
             "from pathlib import Path; patching.write_text(Path(sys.argv[2]), 'after\\n', 'x')")
    done = subprocess.run([sys.executable, "-c", probe, str(tmp_path), str(target)],
                          capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert target.read_text() == "after\n"
