"""Every file of ours that the repository's prose names exists: a comment, docstring or page
that points at a module moved or removed sends the reader nowhere.

A path counts as ours when its folder exists here (``flows/backends/gke/…``); one into a
folder we do not have (``tests/end_to_end/…`` of MaxText, ``docs/spec/…`` of the registry's
distribution) names an upstream file, which its own line cites. Placeholders a text writes
for any name (``deployments/profiles/NAME.yaml``) and the made-up paths of the deploy-step
tests are not references."""

from __future__ import annotations

import re
import subprocess

from flows.common.paths import REPO_ROOT

TOPS = ("flows", "tests", "deployments", "images", "scripts", "benchmarks", "docs")
REFERENCE = re.compile(r"(?<![\w/.-])((?:" + "|".join(TOPS) + r")/[A-Za-z0-9_./-]*[A-Za-z0-9_])")
PLACEHOLDERS = frozenset({"x", "test_x", "new_module"})
TEXT = frozenset({".py", ".md", ".yaml", ".yml", ".sh", ".json", ".txt", ".toml", ".tftpl"})


def _references() -> list[tuple[str, int, str]]:
    listed = subprocess.run(["git", "ls-files", *TOPS, "README.md", "NOTES.md", "CHANGELOG.md",
                             "prefect.yaml"], cwd=REPO_ROOT, capture_output=True, text=True,
                            check=True).stdout.split()
    found = []
    for name in listed:
        path = REPO_ROOT / name
        if path.suffix not in TEXT or not path.is_file():
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            found += [(name, number, m.group(1).rstrip(".")) for m in REFERENCE.finditer(line)]
    return found


def _is_ours_and_missing(reference: str) -> bool:
    path = REPO_ROOT / reference
    stem = path.name.split(".")[0]
    if not path.suffix or stem.isupper() or stem in PLACEHOLDERS:  # a folder, or any name
        return False
    return path.parent.is_dir() and not path.exists()


def test_every_path_of_ours_the_repository_names_exists() -> None:
    references = _references()
    assert len(references) > 500, "the search for references is broken"
    assert [f"{name}:{number}: {ref}" for name, number, ref in references
            if _is_ours_and_missing(ref)] == []
