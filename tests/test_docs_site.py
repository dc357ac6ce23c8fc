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
from tests.support.benchmarks import assert_figures, run_quick


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
    # the pages that embed a generated picture carry its Mermaid block and load the vendored
    # Mermaid (a snippet left unexpanded would show `--8<--` instead)
    for page in sorted((REPO_ROOT / "docs").rglob("*.md")):
        if "--8<-- \"reference/diagrams/" not in page.read_text():
            continue
        relative = page.relative_to(REPO_ROOT / "docs").with_suffix("")
        html = (site / relative / "index.html").read_text()
        assert 'class="mermaid"' in html and "--8<--" not in html, page
        assert "assets/javascripts/mermaid.min.js" in html, page
    # benchmarks/docs_answers.py's quick run, on this site: every question a new user asks
    # is answered by a section of it (the benchmark exits 1 otherwise)
    out = run_quick("docs_answers", str(site))
    assert_figures(out, "README.md:", "site pages:", "- how to set the spend cap:")


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


def test_the_deploy_guide_lists_every_deployment_prefect_yaml_ships() -> None:
    """The guide's table is prose beside the generated reference: a deployment added to
    prefect.yaml must get its row, and a removed one must lose it."""
    import yaml

    shipped = {d["name"] for d in
               yaml.safe_load((REPO_ROOT / "prefect.yaml").read_text())["deployments"]}
    guide = (REPO_ROOT / "docs" / "how-to" / "deploy-prefect-server.md").read_text()
    rows = set(re.findall(r"^\| `([a-z0-9-]+)` \|", guide, flags=re.MULTILINE))
    assert rows == shipped


def test_every_count_of_the_capacity_modes_in_prose_is_the_codes() -> None:
    """"The four modes" was written when there were four; the fifth (queued) came later. Any
    number written before "modes" in the docs or the README is the length of the code's list."""
    from flows.config.capacity import CAPACITY_MODES

    words = {"two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8}
    pages = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").rglob("*.md"))]
    counts = {(page.name, m.group(0)): words.get(m.group(1).lower(), 0) or int(m.group(1))
              for page in pages
              for m in re.finditer(r"\b(two|three|four|five|six|seven|eight|\d) "
                                   r"(?:capacity )?modes\b", page.read_text(), re.IGNORECASE)}
    assert counts, "no count of the modes was found: the search is broken"
    assert {k: v for k, v in counts.items() if v != len(CAPACITY_MODES)} == {}


def test_the_readmes_rehearsal_time_agrees_with_its_sample() -> None:
    """The README states the rehearsal's time as a range and shows a real run's output: the
    sample's own time must lie in that range, and the sentence must name it."""
    readme = (REPO_ROOT / "README.md").read_text()
    low, high = re.search(r"The rehearsal takes (\d+)½ to (\d+)\s+minutes", readme).groups()
    done = float(re.search(r"rehearsal: done in ([\d.]+) s", readme).group(1))
    assert (int(low) + 0.5) * 60 <= done <= int(high) * 60
    assert f"took {round(done)} s" in " ".join(readme.split())


def test_the_vendored_mermaid_is_the_pinned_one_of_the_major_mkdocs_material_loads() -> None:
    """mkdocs-material draws with a `mermaid` already on the page and otherwise fetches
    mermaid@MAJOR from unpkg.com, unreachable offline: the vendored file is the one
    scripts/vendor-mermaid.sh pins, of that major version."""
    import hashlib

    import material

    script = (REPO_ROOT / "scripts" / "vendor-mermaid.sh").read_text()
    version = re.search(r"^VERSION=(\S+)$", script, re.M)
    sha256 = re.search(r"^SHA256=([0-9a-f]{64})$", script, re.M)
    assert version and sha256
    vendored = REPO_ROOT / "docs" / "assets" / "javascripts" / "mermaid.min.js"
    assert hashlib.sha256(vendored.read_bytes()).hexdigest() == sha256.group(1)
    bundle = next((Path(material.__file__).parent / "templates" / "assets" / "javascripts")
                  .glob("bundle.*.min.js")).read_text()
    (major,) = set(re.findall(r"unpkg\.com/mermaid@(\d+)/", bundle))
    assert version.group(1).split(".")[0] == major
