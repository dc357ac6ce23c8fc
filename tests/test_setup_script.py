"""`scripts/setup.sh` with nothing to do answers at once, and anything that decides the venv
(the project's metadata, the script, the interpreter, pip's sources) makes it install again.
Run on a copy of the scripts beside a venv whose python is this one."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from flows.common.paths import REPO_ROOT

UNCHANGED = "orchestrator ready (nothing changed since the last setup)"


def _tree(tmp_path: Path) -> Path:
    root = tmp_path / "clone"
    (root / "scripts").mkdir(parents=True)
    for name in ("scripts/setup.sh", "scripts/uv_env.py", "pyproject.toml"):
        shutil.copy(REPO_ROOT / name, root / name)
    (root / ".venv" / "bin").mkdir(parents=True)
    (root / ".venv" / "bin" / "python").symlink_to(Path(sys.executable).resolve())
    return root


def _setup(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # only the tools the script's first lines use, and no python3.12 on PATH: a run that gets
    # past the unchanged check stops at its first step, whatever this machine has installed
    tools = root / "tools"
    tools.mkdir(exist_ok=True)
    for tool in ("cat", "sha256sum", "cut", "readlink", "rm", "dirname", "echo"):
        if not (tools / tool).exists():
            (tools / tool).symlink_to(shutil.which(tool) or f"/bin/{tool}")
    env = {**os.environ, "PATH": str(tools), "HOME": str(root)}
    return subprocess.run([shutil.which("bash") or "/bin/bash", "scripts/setup.sh", *args], cwd=root,
                          env=env, capture_output=True, text=True, timeout=60)


def _stamp_as_a_complete_setup_would(root: Path, installed: str | None = "dev") -> None:
    """``installed`` None: a stamp of the hash alone, as setups before the --run mode wrote
    (they always installed the dev tools)."""
    script = (root / "scripts" / "setup.sh").read_text()
    inputs = script[script.index("setup_inputs() {"):script.index("STAMP=")]
    what = f' {installed}' if installed else ""
    subprocess.run(["bash", "-c", f'{inputs}\necho "$(inputs_hash){what}" > '
                    '.venv/.tpurl-setup-stamp'], cwd=root, check=True,
                   env={**os.environ, "HOME": str(root)})


def test_an_unchanged_setup_answers_without_installing(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    _stamp_as_a_complete_setup_would(root)
    done = _setup(root)
    assert (done.returncode, done.stdout.strip()) == (0, UNCHANGED), done.stderr


def test_a_change_of_what_decides_the_venv_installs_again(tmp_path: Path) -> None:
    for change in ("pyproject.toml", "scripts/uv_env.py", "pip.conf", "interpreter"):
        root = _tree(tmp_path / change.replace("/", "-"))
        _stamp_as_a_complete_setup_would(root)
        if change == "pip.conf":
            (root / ".config" / "pip").mkdir(parents=True)
            (root / ".config" / "pip" / "pip.conf").write_text("[global]\nindex-url = x\n")
        elif change == "interpreter":
            (root / ".venv" / "bin" / "python").unlink()
            (root / ".venv" / "bin" / "python").symlink_to("/usr/bin/true")
        else:
            with (root / change).open("a") as file:
                file.write("\n# changed\n")
        done = _setup(root)
        assert UNCHANGED not in done.stdout, change
        assert "Python 3.12 not found" in done.stderr, (change, done.stderr)
        assert not (root / ".venv" / ".tpurl-setup-stamp").exists(), change


def test_a_run_setup_serves_the_rehearsal_and_not_the_tests(tmp_path: Path) -> None:
    """`setup.sh --run` (scripts/rehearse.sh) installs without the dev tools; a venv set up
    that way answers a --run setup at once, while the full setup (scripts/test.sh) installs
    the dev tools over it, and `setup.sh --gke` the cloud libraries. A venv set up for GKE
    answers a --run setup too. A venv with the dev tools, or an older hash-only stamp (setups
    then always installed them), answers all three."""
    for installed, args, unchanged in ((("run", ("--run",), True), ("run", (), False),
                                        ("dev", ("--run",), True), ("dev", (), True),
                                        ("dev", ("--gke",), True), ("gke", ("--gke",), True),
                                        ("gke", ("--run",), True), ("gke", (), False),
                                        ("run", ("--gke",), False),
                                        (None, ("--run",), True), (None, (), True))):
        root = _tree(tmp_path / f"{installed}-{'-'.join(args) or 'full'}")
        _stamp_as_a_complete_setup_would(root, installed)
        done = _setup(root, *args)
        assert (UNCHANGED in done.stdout) == unchanged, (installed, args, done.stdout, done.stderr)
        if not unchanged:
            assert "Python 3.12 not found" in done.stderr, (installed, args, done.stderr)


def test_an_unknown_setup_argument_is_refused_before_anything(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    done = _setup(root, "--fast")
    assert done.returncode == 2 and "usage: bash scripts/setup.sh [--run | --gke]" in done.stderr
    assert not (root / ".venv" / ".tpurl-setup-stamp").exists()


def test_a_fresh_trees_first_setup_leaves_a_stamp_the_next_one_answers_from(
        tmp_path: Path) -> None:
    """The whole script for real, from no venv (the project's package and metadata copied, the
    machine's installer and package index): the stamp it leaves must be the one the next run
    computes. Read before the venv existed, it named no interpreter, so a fresh clone's first
    rerun installed everything again (6 s of the 9 s the first unchanged rehearsal took)."""
    root = tmp_path / "clone"
    (root / "scripts").mkdir(parents=True)
    for name in ("scripts/setup.sh", "scripts/uv_env.py", "pyproject.toml", "README.md"):
        shutil.copy(REPO_ROOT / name, root / name)
    shutil.copytree(REPO_ROOT / "flows", root / "flows",
                    ignore=shutil.ignore_patterns("__pycache__"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("VIRTUAL_ENV")}

    def setup() -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", "scripts/setup.sh", "--run"], cwd=root, env=env,
                              capture_output=True, text=True, timeout=600)

    first = setup()
    assert first.returncode == 0 and "orchestrator ready: prefect" in first.stdout, first.stderr
    again = setup()
    assert (again.returncode, again.stdout.strip()) == (0, UNCHANGED), again.stderr
