"""The docs site builds with `mkdocs build --strict`: a broken link, a
missing anchor or a page left out of the navigation fails the build, and so this test."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from flows.common.paths import REPO_ROOT


def test_the_site_builds_strictly_with_every_page_in_the_nav(tmp_path: Path) -> None:
    site = tmp_path / "site"
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                           str(site)], cwd=REPO_ROOT, capture_output=True, text=True,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"}, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    index = json.loads((site / "search" / "search_index.json").read_text())
    locations = {doc["location"].split("#")[0] for doc in index["docs"]}
    for page in sorted((REPO_ROOT / "docs").rglob("*.md")):
        relative = page.relative_to(REPO_ROOT / "docs").with_suffix("")
        url = "" if relative.name == "index" else (
            f"{relative.parent}/" if relative.name == "README" else f"{relative}/")
        assert url.removeprefix("./") in locations, f"{page} is not in the built site"


def test_every_link_of_the_readme_names_a_file_of_the_repository() -> None:
    """The README is the front door into docs/ but not part of the site, so mkdocs does not
    check its links: a page moved or renamed must not leave it pointing nowhere."""
    readme = (REPO_ROOT / "README.md").read_text()
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme)
    assert len(targets) >= 10, "the README's links were not found: the search is broken"
    missing = [t for t in targets if "://" not in t and not (REPO_ROOT / t).is_file()]
    assert missing == []


def test_the_readme_and_the_docs_index_reach_every_guide() -> None:
    """A guide the site's navigation lists but neither front door names is found only by
    someone already browsing the site: every tutorial, how-to and integration page is linked
    from the README (as ``docs/…``) and from the docs' index (relative to docs/)."""
    readme = (REPO_ROOT / "README.md").read_text()
    index = (REPO_ROOT / "docs" / "index.md").read_text()
    guides = [p.relative_to(REPO_ROOT / "docs").as_posix()
              for folder in ("tutorials", "how-to", "integrations")
              for p in sorted((REPO_ROOT / "docs" / folder).glob("*.md"))]
    assert len(guides) > 10
    assert [g for g in guides if f"(docs/{g}" not in readme] == []
    assert [g for g in guides if f"]({g}" not in index] == []
