"""The flow image installs from a hash lock (images/flow/requirements.lock) that satisfies
pyproject.toml and that the content tag covers, so one tag names one set of files."""

from __future__ import annotations

import re
import tomllib

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from flows import deploy_steps
from flows.common.paths import REPO_ROOT

LOCK = REPO_ROOT / "images" / "flow" / "requirements.lock"
DOCKERFILE = (REPO_ROOT / "images" / "flow" / "Dockerfile").read_text()


def _pins() -> dict[str, tuple[str, list[str]]]:
    """name → (version, hashes), parsed the way pip reads the file (continued lines joined)."""
    text = re.sub(r"\\\n", " ", LOCK.read_text())
    pins = {}
    for line in text.splitlines():
        line = line.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        spec, *rest = line.split()
        name, version = spec.split("==")
        pins[canonicalize_name(name)] = (version, [h for h in rest if h.startswith("--hash=")])
    return pins


def test_every_pin_has_hashes():
    pins = _pins()
    assert len(pins) > 50
    assert not [name for name, (_, hashes) in pins.items() if not hashes]


def test_the_lock_satisfies_pyproject_and_its_gcp_and_tracking_extras_and_build_system():
    """The tracking extra too: a flow pod reports to MLflow and registers models."""
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    wanted = [*project["project"]["dependencies"],
              *project["project"]["optional-dependencies"]["gcp"],
              *project["project"]["optional-dependencies"]["tracking"],
              *project["build-system"]["requires"]]
    pins = _pins()
    for text in wanted:
        requirement = Requirement(text)
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{name} is not in {LOCK.name}: regenerate it (its header)"
        assert requirement.specifier.contains(pins[name][0], prereleases=True), (text, pins[name])


def test_the_image_installs_only_the_lock_with_hashes_and_the_tag_covers_it():
    assert "--require-hashes" in DOCKERFILE and "-r /tmp/requirements.lock" in DOCKERFILE
    assert "--no-deps --no-build-isolation -e ." in DOCKERFILE
    sources = deploy_steps.copy_sources(DOCKERFILE)
    assert "images/flow/requirements.lock" in sources
    files = deploy_steps.context_files(REPO_ROOT, "images/flow/Dockerfile")
    assert "images/flow/requirements.lock" in deploy_steps.copied(files, sources)
