"""The rehearsal's tunix is the image's and its lock is hash-checked.

MaxText maxtext-v0.2.4 installs tunix from GitHub commit c4ec573d with --no-deps
(src/dependencies/extra_deps/post_train_github_deps.txt:1,
src/dependencies/scripts/install_post_train_extra_deps.py:99-109). The rehearsal takes the
same commit from GitHub where git can reach it, else the wheel of it from the folder
TPURL_WHEEL_DIR names, its sha256 checked first; neither is an error naming both ways. Real
git (a local repository stands for a reachable GitHub, an .invalid host for an unreachable
one), real files, real installers."""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from flows.backends.local import installer
from flows.backends.local.tunix_source import (
    WHEEL_DIR_ENV,
    NoTunixSource,
    TunixPin,
    TunixSource,
    choose_source,
    github_reachable,
    load_pin,
    lock_without_tunix,
    read_pin,
    resolve_source,
)
from flows.common.paths import REHEARSAL_LOCK

COMMIT = "c4ec573d29e4c3a3955b348256d464b119c8a6d1"  # MaxText 0.2.4 post_train_github_deps.txt:1
WHEEL_SHA256 = "751562311cd6afcca79de7e66cccb4bc26bebe254f2b61628caa68bd7d2b0c3c"
UNREACHABLE = "https://github.invalid/google/tunix"  # .invalid never resolves (RFC 2606)


def _pin(**changes: str) -> TunixPin:
    fields = {"version": "0.1.8", "wheel_sha256": "0" * 64,
              "repo_url": UNREACHABLE, "commit": COMMIT, **changes}
    return TunixPin(**fields)


def test_the_lock_pins_the_images_commit_and_the_wheel_built_from_it() -> None:
    pin = load_pin(REHEARSAL_LOCK)
    assert (pin.version, pin.commit, pin.wheel_sha256) == ("0.1.8", COMMIT, WHEEL_SHA256)
    assert pin.repo_url == "https://github.com/google/tunix"
    assert pin.wheel_name == "google_tunix-0.1.8-py3-none-any.whl"


def test_every_requirement_of_the_lock_carries_a_hash() -> None:
    """--require-hashes style: pip and uv refuse the lock otherwise; tensorflow-cpu replaces
    tensorflow, PyPI's tunix 0.1.7 is gone, and wandb is in (tunix's metrics logger
    writes to W&B only where it imports)."""
    text = REHEARSAL_LOCK.read_text()
    requirements = [b for b in re.split(r"\n(?=[A-Za-z0-9])", text) if not b.startswith("#")]
    assert len(requirements) == 268  # 266 + wandb and its one new requirement, cwevals
    for block in requirements:
        first = block.splitlines()[0]
        assert re.match(r"^[a-z0-9][a-z0-9.-]*==\S+ \\$", first), first
        assert re.search(r"--hash=sha256:[0-9a-f]{64}", block), first
    names = {b.split("==")[0] for b in requirements}
    assert "tensorflow-cpu" in names and "tensorflow" not in names
    assert {"wandb", "cwevals"} <= names
    assert "google-tunix==0.1.7" not in text


def test_without_tunix_drops_its_block_and_nothing_else() -> None:
    text = REHEARSAL_LOCK.read_text()
    rest = lock_without_tunix(text)
    assert "google-tunix" not in rest.replace("# google-tunix", "")
    assert WHEEL_SHA256 not in rest
    assert len(text.splitlines()) - len(rest.splitlines()) == 2
    assert rest.count("--hash=") == text.count("--hash=") - 1


def test_a_pin_without_a_hash_or_commit_is_refused_with_the_file_to_fix() -> None:
    github = f"google-tunix @ git+https://github.com/google/tunix@{COMMIT}\n"
    with pytest.raises(ValueError, match="google-tunix==VERSION"):
        read_pin("google-tunix==0.1.8\n", github)
    with pytest.raises(ValueError, match="40-hex commit"):
        read_pin(f"google-tunix==0.1.8 \\\n    --hash=sha256:{WHEEL_SHA256}\n",
                 "google-tunix @ git+https://github.com/google/tunix@main\n")


def test_github_wins_when_it_answers() -> None:
    assert choose_source(_pin(), github=True, wheel_dir=None, wheel_sha256=None) == \
        TunixSource("github")


@pytest.mark.parametrize(("wheel_dir", "digest", "says"), [
    (None, None, f"{WHEEL_DIR_ENV} is not set"),
    ("/w", None, "does not exist"),
    ("/w", "1" * 64, "not built from commit " + COMMIT),
])
def test_neither_way_is_an_error_naming_both(wheel_dir: str | None, digest: str | None,
                                             says: str) -> None:
    with pytest.raises(NoTunixSource) as refused:
        choose_source(_pin(), github=False, wheel_dir=wheel_dir, wheel_sha256=digest)
    text = str(refused.value)
    assert says in text and "from GitHub" in text and f"export {WHEEL_DIR_ENV}=" in text
    assert COMMIT in text


def test_the_wheel_with_the_locks_hash_is_chosen_without_github(tmp_path: Path) -> None:
    wheel = tmp_path / "google_tunix-0.1.8-py3-none-any.whl"
    wheel.write_bytes(b"built from the commit")
    pin = _pin(wheel_sha256=hashlib.sha256(b"built from the commit").hexdigest())
    assert resolve_source(pin, {WHEEL_DIR_ENV: str(tmp_path)}) == TunixSource("wheel", tmp_path)
    wheel.write_bytes(b"something else")
    with pytest.raises(NoTunixSource, match="has sha256"):
        resolve_source(pin, {WHEEL_DIR_ENV: str(tmp_path)})
    with pytest.raises(NoTunixSource, match="is not set"):
        resolve_source(pin, {})


def test_a_repository_git_can_list_counts_as_reachable(tmp_path: Path) -> None:
    repo = tmp_path / "tunix"
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "c"], check=True)
    assert github_reachable(f"file://{repo}")
    assert resolve_source(_pin(repo_url=f"file://{repo}"), {}) == TunixSource("github")
    assert not github_reachable(UNREACHABLE, timeout_s=30)


def _wheel(folder: Path, name: str, version: str, body: bytes) -> Path:
    """A minimal pure-Python wheel (PEP 427: METADATA, WHEEL, RECORD in the .dist-info)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    with zipfile.ZipFile(path, "w") as whl:
        whl.writestr(f"{name}/__init__.py", body)
        whl.writestr(f"{info}/METADATA",
                     f"Metadata-Version: 2.1\nName: {name.replace('_', '-')}\nVersion: {version}\n")
        whl.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: "
                     "true\nTag: py3-none-any\n")
        whl.writestr(f"{info}/RECORD", "")
    return path


@pytest.mark.parametrize("tool", ["uv", "pip"])
def test_both_installers_take_the_hashed_lock_and_refuse_a_wrong_wheel(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tool: str) -> None:
    """install_command's argv for uv and pip, run for real: the wheel whose sha256 the lock
    lists installs from the find-links folder with --require-hashes; another file of the
    same name and version is refused (the machine's pip constraints do not get in the way)."""
    monkeypatch.setenv("TPURL_INSTALLER", tool)
    constraints = tmp_path / "constraints.txt"  # as this machine's pip.conf names one
    constraints.write_text("torch<=2.14.1\n")
    monkeypatch.setenv("UV_CONSTRAINT", str(constraints))  # as scripts/rehearse.sh exports it
    monkeypatch.setenv("PIP_CONSTRAINT", str(constraints))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", *(["--without-pip"] if tool == "uv" else []),
                    str(venv)], check=True)
    python = venv / "bin" / "python"
    wheels = tmp_path / "wheels"
    good = _wheel(wheels, "tpurl_hash_probe", "0.1.8", b"VALUE = 'c4ec573d'\n")
    lock = tmp_path / "lock.txt"
    lock.write_text(f"tpurl-hash-probe==0.1.8 \\\n    --hash=sha256:"
                    f"{hashlib.sha256(good.read_bytes()).hexdigest()}\n")
    argv, env = installer.install_command(python, lock, hashes=True, find_links=wheels)
    assert "--require-hashes" in argv and "--no-deps" in argv and str(wheels) in argv
    assert argv[0].endswith("uv") == (tool == "uv")
    done = subprocess.run(argv, env={**_environ(), **env}, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    shown = subprocess.run([str(python), "-c", "import tpurl_hash_probe as p; print(p.VALUE)"],
                           capture_output=True, text=True, check=True)
    assert shown.stdout.strip() == "c4ec573d"

    other = tmp_path / "other"
    _wheel(other, "tpurl_hash_probe", "0.1.8", b"VALUE = 'tampered'\n")
    again = tmp_path / "venv2"
    subprocess.run([sys.executable, "-m", "venv", *(["--without-pip"] if tool == "uv" else []),
                    str(again)], check=True)
    argv, env = installer.install_command(again / "bin" / "python", lock, hashes=True,
                                          find_links=other)
    refused = subprocess.run(argv, env={**_environ(), **env}, capture_output=True, text=True)
    assert refused.returncode != 0
    assert "hash" in (refused.stdout + refused.stderr).lower()


def _environ() -> dict[str, str]:
    import os

    return dict(os.environ)
