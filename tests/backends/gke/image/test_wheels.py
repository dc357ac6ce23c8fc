"""The post-training image's W&B wheels: the lock matches the rehearsal's, the
files reach the build context only by their locked sha256, the in-build installer refuses
what the lock does not name, and the content tag needs no wheel. (The real build installing
them on the stand-in base: test_build.py.)"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import zipfile
from pathlib import Path
from types import ModuleType

import pytest

from flows.backends.gke.image.context import (
    SOURCES,
    WHEELS_LOCK,
    build_context,
    content_tag,
)
from flows.backends.gke.image.wheels import (
    LOCK_FILE,
    WHEEL_DIR_ENV,
    LockedWheel,
    WheelsUnavailable,
    context_wheels,
    read_lock,
)
from flows.common.paths import PATCHES_FILE, REHEARSAL_LOCK
from flows.core.patching import load_declarations

PATCHES = load_declarations(PATCHES_FILE)
LOCKED = read_lock(LOCK_FILE.read_text())


def _installer() -> ModuleType:
    path = SOURCES["wheels/install_wheels.py"]
    spec = importlib.util.spec_from_file_location("install_wheels", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _rehearsal_pins() -> dict[tuple[str, str], set[str]]:
    pins: dict[tuple[str, str], set[str]] = {}
    current: tuple[str, str] | None = None
    for line in REHEARSAL_LOCK.read_text().splitlines():
        if match := re.match(r"^([A-Za-z0-9_.-]+)==(\S+)", line):
            current = (re.sub(r"[-_.]+", "-", match[1]).lower(), match[2])
            pins[current] = set()
        elif (digest := re.search(r"sha256:([0-9a-f]{64})", line)) and current:
            pins[current].add(digest[1])
    return pins


def test_the_image_installs_the_rehearsals_wandb_and_requirements_file_for_file():
    """Same versions as images/rehearsal/requirements.lock, and each file one of those the
    rehearsal's lock accepts; pip (the runner, never installed) is the one addition."""
    rehearsal = _rehearsal_pins()
    by_name = {re.sub(r"[-_.]+", "-", w.name).lower(): w for w in LOCKED}
    assert by_name["wandb"].version == "0.31.0"
    extra = []
    for name, wheel in by_name.items():
        if (name, wheel.version) not in rehearsal:
            extra.append(name)
            continue
        assert wheel.sha256 in rehearsal[(name, wheel.version)], name
    assert extra == ["pip"]
    assert {"pydantic-core", "protobuf", "requests", "cwevals"} <= set(by_name)


def test_a_pin_with_no_or_two_hashes_is_refused():
    with pytest.raises(ValueError, match=r"exactly one --hash=sha256.*\['a'\]"):
        read_lock(f"a==1 \\\n    --hash=sha256:{'0' * 64} \\\n    --hash=sha256:{'1' * 64}\n")
    with pytest.raises(ValueError, match="no pins"):
        read_lock("# nothing\n")


def test_the_content_tag_follows_the_lock_and_installer_but_needs_no_wheel(tmp_path: Path):
    context = build_context(PATCHES)
    assert context.files[WHEELS_LOCK] == LOCK_FILE.read_bytes()
    assert "wheels/install_wheels.py" in context.files
    stray = tmp_path / "x.whl"
    stray.write_bytes(b"not hashed into the tag")
    tag = content_tag("sha256:aa", PATCHES, context)
    assert content_tag("sha256:aa", PATCHES, context.with_wheels({"wheels/x.whl": stray})) == tag
    # ... and the wheels travel: in the written context and in Cloud Build's tarball.
    written = context.with_wheels({"wheels/x.whl": stray}).write(tmp_path / "ctx")
    assert (written / "wheels/x.whl").read_bytes() == b"not hashed into the tag"
    assert (written / "wheels/wandb.lock").read_bytes() == LOCK_FILE.read_bytes()


def test_a_wheel_with_another_sha256_is_not_taken_and_the_error_names_the_fix(tmp_path: Path):
    """A folder holding a same-named file with other bytes, and pip download bringing the
    real file, whose sha256 is not the (made-up) locked one: refused before any build."""
    idna = next(w for w in LOCKED if w.name == "idna")
    lock = tmp_path / "wandb.lock"
    lock.write_text(f"idna=={idna.version} \\\n    --hash=sha256:{'ab' * 32}\n")
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / f"idna-{idna.version}-py3-none-any.whl").write_bytes(b"something else")
    env = {WHEEL_DIR_ENV: str(folder), "TPURL_CACHE_DIR": str(tmp_path / "cache"),
           "PATH": os.environ.get("PATH", "")}
    with pytest.raises(WheelsUnavailable) as caught:
        context_wheels(lock, env)
    message = str(caught.value)
    assert f"idna=={idna.version}" in message and str(folder) in message
    assert "another sha256" in message
    assert caught.value.code == "image/wheels-unavailable"
    assert WHEEL_DIR_ENV in caught.value.fix and "pip download" in caught.value.fix
    downloaded = sorted((tmp_path / "cache/wheels/post-training").glob("idna-*.whl"))
    assert [p.name for p in downloaded] == [f"idna-{idna.version}-py3-none-any.whl"]
    assert hashlib.sha256(downloaded[0].read_bytes()).hexdigest() == idna.sha256


def test_the_locked_wheels_come_from_the_named_folder_by_sha256(tmp_path: Path):
    """A folder holding the locked file serves it (no download: the cache stays empty)."""
    idna = next(w for w in LOCKED if w.name == "idna")
    source = context_wheels(_one_pin_lock(tmp_path, idna), {"TPURL_CACHE_DIR": str(tmp_path / "c1")})
    folder = tmp_path / "folder"
    folder.mkdir()
    [(name, path)] = source.items()
    (folder / path.name).write_bytes(path.read_bytes())
    found = context_wheels(_one_pin_lock(tmp_path, idna),
                           {WHEEL_DIR_ENV: str(folder), "TPURL_CACHE_DIR": str(tmp_path / "c2")})
    assert found == {name: folder / path.name}
    assert name == f"wheels/{path.name}"
    assert not (tmp_path / "c2").exists()


def _one_pin_lock(tmp_path: Path, wheel: LockedWheel) -> Path:
    lock = tmp_path / "one.lock"
    lock.write_text(f"{wheel.name}=={wheel.version} \\\n    --hash=sha256:{wheel.sha256}\n")
    return lock


def _wheel(folder: Path, name: str, version: str) -> Path:
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr(f"{name}/__init__.py", f"# {name} {version}\n")
    return path


def test_the_in_build_installer_refuses_a_stray_or_missing_wheel(tmp_path: Path):
    installer = _installer()
    a, b = _wheel(tmp_path, "a", "1"), _wheel(tmp_path, "b", "2")
    digest = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in (a, b)}
    lock = installer.read_lock(f"A==1 \\\n    --hash=sha256:{digest[a]}\n"
                               f"b==2 \\\n    --hash=sha256:{digest[b]}\n")
    assert installer.check_wheels(lock, tmp_path) == {"a": a, "b": b}
    stray = _wheel(tmp_path, "c", "3")
    with pytest.raises(SystemExit, match=rf"tpurl: WHEELS:.*\['{stray.name}'\].*absent: \[\]"):
        installer.check_wheels(lock, tmp_path)
    stray.unlink()
    b.write_bytes(b"altered")
    with pytest.raises(SystemExit, match=r"\['b-2-py3-none-any.whl'\]; locked but absent: \['b'\]"):
        installer.check_wheels(lock, tmp_path)
