"""The repository's text names nothing its reader cannot open.

A comment, docstring, doc page or note that names an issue, a stop or a pitfall by its number
points at a tracker or a working session that is not in the repository: the reader learns
that a reason existed, not what it is. Each such place says the reason itself or links a
decision record in docs/decisions/. An upstream project's issue stays citable as
``owner/repo#N`` (a public address anyone can open). Text that narrates the code's history
("the code before ...") says what is true now instead; git keeps the history.

The scan reads every text file under the project's own folders and top-level files;
vendored upstream text (the JobSet CRD schema) is left out, and each allowed hit is listed
in ``ALLOWED`` with the reason it is not a reference.
"""
from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCANNED = ("flows", "tests", "docs", "benchmarks", "scripts", "images", "deployments",
           "README.md", "NOTES.md", "pyproject.toml", "prefect.yaml", "mkdocs.yml")
TEXT_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".sh", ".toml", ".txt", ".in", ".json",
                 ".tftpl", ".lock", ""}
SKIPPED_DIRS = {"__pycache__", ".venv", ".venvs", "site", ".tpurl"}
# Upstream text kept verbatim: the JobSet CRD's own descriptions (PKCS#8 and the like).
VENDORED = ("tests/support/schemas/",)
# This module: its patterns and examples name what they catch.
SELF = Path(__file__).resolve().relative_to(ROOT).as_posix()

# Each pattern names a thing the reader cannot open, or history told as prose.
PATTERNS: dict[str, re.Pattern[str]] = {
    "issue number": re.compile(r"\bissues? #?\d+", re.IGNORECASE),
    "numbered item": re.compile(r"\bitems? \d+(?: and \d+)?\b(?=[ :,)])", re.IGNORECASE),
    "session stop": re.compile(r"\bstops? \d+\b", re.IGNORECASE),
    "pitfall number": re.compile(r"\bpitfalls?(?:\.md)?,? #?\d+", re.IGNORECASE),
    # (split so this line does not itself hold what it catches)
    "outside reviewer": re.compile(r"\bgrade" r"rs?\b|\bCI that" r" checks\b", re.IGNORECASE),
    # notes kept outside the repository: a research folder, a pitfalls page, a brief
    "outside note": re.compile(r"\bresearch/|\bpitfalls\.md\b|\bthe brief\b|\bBRIEF\.md\b",
                               re.IGNORECASE),
    # "12.7: the code before waited", "(20.4)": a tracker's sub-item by its number alone
    "item number": re.compile(r'(?:"""|#|^)\s*\d{1,2}\.\d{1,2}:|(?<![\w.(])\(\d{1,2}\.\d{1,2}\)'),
    "bare #N": re.compile(r"(?<![\w\"&/])#\d+\b(?![\w\"-])"),
    "history": re.compile(r"\bthe code before\b|\bbefore this change\b|\bthe old code\b"
                          r"|\bold behaviou?r\b", re.IGNORECASE),
}
# An upstream issue or pull request, citable by anyone: owner/repo#N.
UPSTREAM_ISSUE = re.compile(r"[\w.-]+/[\w.-]+#\d+")

# (path, the line's text that holds the hit): why it is not a reference.
ALLOWED: dict[tuple[str, str], str] = {
    # patch(1)'s own output quoted as a failing program's log lines
    ("tests/core/test_failures.py", "hunk #1 FAILED"): "patch's output",
    ("tests/runpage/test_run_log.py", "hunk #1 FAILED"): "patch's output",
    ("tests/runpage/test_run_log.py", "hunk #2 FAILED"): "patch's output",
}


@dataclass(frozen=True)
class Hit:
    path: str
    line_number: int
    kind: str
    line: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line_number}: {self.kind}: {self.line.strip()}"


def _candidates(root: Path) -> list[Path]:
    """The tracked files under SCANNED (git's list, so a scratch file of one's own is not
    judged), or every file there when ``root`` is no git checkout (an exported tree)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--", *SCANNED], cwd=root,
                            capture_output=True, check=False)
    if listed.returncode == 0 and listed.stdout:
        return [root / name for name in sorted(listed.stdout.decode().split("\0")) if name]
    return [path for name in SCANNED
            for path in ([root / name] if (root / name).is_file()
                         else sorted((root / name).rglob("*")))]


def scanned_files(root: Path) -> list[Path]:
    files: list[Path] = []
    for path in _candidates(root):
        relative = path.relative_to(root).as_posix()
        if (not path.is_file() or SKIPPED_DIRS & set(path.relative_to(root).parts)
                or relative.startswith(VENDORED) or relative == SELF
                or path.suffix not in TEXT_SUFFIXES):
            continue
        files.append(path)
    return files


def hits_in(relative: str, text: str) -> list[Hit]:
    """Every line of ``text`` a pattern matches, less upstream citations and ALLOWED."""
    found: list[Hit] = []
    for number, line in enumerate(text.splitlines(), start=1):
        bare = UPSTREAM_ISSUE.sub("", line)
        for kind, pattern in PATTERNS.items():
            if not pattern.search(bare):
                continue
            if any(path == relative and snippet in line for path, snippet in ALLOWED):
                continue
            found.append(Hit(relative, number, kind, line))
    return found


def repository_hits(root: Path = ROOT) -> list[Hit]:
    hits: list[Hit] = []
    for path in scanned_files(root):
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # a binary file (a wheel's tarball): no prose in it
        hits.extend(hits_in(path.relative_to(root).as_posix(), text))
    return hits


def test_no_text_names_a_tracker_item_a_session_or_the_code_before() -> None:
    hits = repository_hits()
    assert not hits, ("say the reason, or link docs/decisions/, instead of:\n"
                      + "\n".join(map(str, hits)))


def test_every_allowed_hit_still_exists() -> None:
    """An allow-list entry whose line is gone would quietly allow the next one."""
    for path, snippet in ALLOWED:
        assert snippet in (ROOT / path).read_text(encoding="utf-8"), (path, snippet)


def test_the_patterns_catch_each_kind_and_spare_upstream_citations() -> None:
    caught = {
        '"""12.7: the code before waited out the budget."""': {"item number", "history"},
        # each example is split in two so the test's own lines do not hold what it catches
        "# Issue" " 37.1: a venv the stage did not make": {"issue number"},
        "that stage ran until stop" " 45": {"session stop"},
        "gcluster prompts on stdin (pitfall" " 12)": {"pitfall number"},
        "objectAdmin lacks it; pitfalls.md #8": {"pitfall number", "bare #N", "outside note"},
        "checked by hand against research/gke-jobset.md": {"outside note"},
        "The brief's grep": {"outside note"},
        "issue" " 31 item 7: an error": {"issue number", "numbered item"},
        "a tmpfs (20.4).": {"item number"},
        "the CI that" " checks the work": {"outside reviewer"},
        "as #11079 shows": {"bare #N"},
    }
    for line, kinds in caught.items():
        assert {hit.kind for hit in hits_in("x.py", line)} == kinds, line
    spared = ["Kueue does not fall back (kubernetes-sigs/kueue#2560).",
              "maxtext PR AI-Hypercomputer/maxtext#3742", 'fill="#555"', "PKCS#8 format",
              "int(0.2) = 0", "evict_releasing(0.6)", "the [pool](deploy.md#3-the-pool)",
              "time.sleep(0.5)", "127.0.0.1:5000", "spend_margin 0.2: 20 %"]
    for line in spared:
        assert hits_in("x.py", line) == [], line


def test_the_scan_reads_every_kind_of_project_file() -> None:
    """A scan that read nothing would pass: it reads code, tests, docs, notes and scripts."""
    scanned = {path.relative_to(ROOT).as_posix() for path in scanned_files(ROOT)}
    for expected in ("flows/pipeline.py", "tests/conftest.py", "docs/architecture.md",
                     "docs/decisions/0018-ci-tiers-and-lanes.md", "NOTES.md", "README.md",
                     "scripts/test.sh", "images/post-training/Dockerfile", "pyproject.toml"):
        assert expected in scanned, expected
    assert SELF not in scanned and not any(p.startswith(VENDORED) for p in scanned)
