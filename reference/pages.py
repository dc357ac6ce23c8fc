"""Which page each renderer writes (docs/reference/), and the writer behind
``python -m reference``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from flows.common.paths import REPO_ROOT
from reference import (
    cli_page,
    deployments_page,
    diagrams,
    events_page,
    failures_page,
    formats_page,
    health_page,
    profile_page,
    troubleshooting_page,
)

REFERENCE_DIR = REPO_ROOT / "docs" / "reference"
PAGES: dict[str, Callable[[], str]] = {
    "cli.md": cli_page.render,
    "profile.md": profile_page.render,
    "deployments.md": deployments_page.render,
    "events.md": events_page.render,
    "failures.md": failures_page.render,
    "formats.md": formats_page.render,
    "detectors.md": health_page.render,
    "troubleshooting.md": troubleshooting_page.render,
    **diagrams.PAGES,
}


def write(directory: Path = REFERENCE_DIR) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, render in PAGES.items():
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render())
        written.append(path)
    return written
