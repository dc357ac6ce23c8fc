"""How findable the documentation is: README lines, pages of the site, profile
fields with a description, and which page of the built site answers each of five questions
a new user asks, found by grep of the site's search index as a reader's search box would.

Usage: python benchmarks/docs_answers.py [SITE_DIR] [--repo DIR]

SITE_DIR is a built site (default: build one now, with `mkdocs build` into a temporary
folder, from --repo, default this checkout). A question is answered by a section of the
index whose text matches every pattern of the question; the script prints, per question,
the number of such sections and their pages, so a before/after comparison names where a
reader lands. The questions and their patterns were written down before the docs moved.
Exits 1 when a question has no answering section: the site no longer answers it, or the
index no longer holds sections this can search. Its quick run (the tests') is on the site
tests/test_docs_site.py builds: SITE_DIR given, no build of its own.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# question -> patterns that must all match one section's text (case-insensitive)
QUESTIONS: dict[str, tuple[str, ...]] = {
    "how to set the spend cap": (r"gke\.max_usd_per_run", r"\bcap\b"),
    "what `preempted` means": (r"\bpreempted\b", r"resubmitted|resumed|spot"),
    "how to announce a dataset": (r"tpurl announce", r"--dataset"),
    "which roles the operator needs": (r"roles/container\.admin",),
    "how to add a zone": (r"gke\.zones?\b", r"\bzones?\b.*\b(add|list|fallback|another)\b"),
}


def answers(index: dict, questions: dict[str, tuple[str, ...]] = QUESTIONS,
            ) -> dict[str, list[str]]:
    """question -> locations (page#anchor) of the sections matching all its patterns."""
    found: dict[str, list[str]] = {}
    for question, patterns in questions.items():
        found[question] = [doc["location"] for doc in index["docs"]
                           if doc["location"] and all(
                               re.search(p, doc["title"] + " " + doc["text"], re.I | re.S)
                               for p in patterns)]
    return found


def _build(repo: Path, into: Path) -> Path:
    subprocess.run([sys.executable, "-m", "mkdocs", "build", "--quiet", "-f",
                    str(repo / "mkdocs.yml"), "--site-dir", str(into)], check=True)
    return into


def _described_fields(repo: Path) -> tuple[int, int] | None:
    """(fields with a description, all fields) as this checkout's reference page lists them."""
    page = repo / "docs" / "reference" / "profile.md"
    if not page.exists():
        return None
    rows = [line for line in page.read_text().splitlines() if line.startswith("| `")]
    described = [row for row in rows if row.rstrip(" |").rsplit("|", 1)[-1].strip()]
    return len(described), len(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("site", nargs="?", type=Path)
    parser.add_argument("--repo", type=Path, default=REPO)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        site = args.site or _build(args.repo, Path(scratch) / "site")
        index = json.loads((site / "search" / "search_index.json").read_text())
        pages = sorted({doc["location"].split("#")[0] for doc in index["docs"]})
        print(f"README.md: {len((args.repo / 'README.md').read_text().splitlines())} lines")
        print(f"site pages: {len(pages)}")
        if (fields := _described_fields(args.repo)) is not None:
            print(f"profile fields with a description: {fields[0]} of {fields[1]}")
        found = answers(index)
        for question, where in found.items():
            first = sorted({w.split('#')[0] or 'index' for w in where})
            print(f"- {question}: {len(where)} sections; pages {', '.join(first) or 'none'}")
            for location in where[:4]:
                print(f"    {location}")
    unanswered = [question for question, where in found.items() if not where]
    if unanswered:
        print(f"unanswered: {'; '.join(unanswered)}")
    return 1 if unanswered else 0


if __name__ == "__main__":
    sys.exit(main())
