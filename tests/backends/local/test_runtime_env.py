"""The rehearsal's MaxText programs share JAX's persistent compilation cache and Python's
bytecode beside the venvs, whatever the output root, so a rerun reuses what XLA and Python
compiled before."""

from __future__ import annotations

from pathlib import Path

from flows.backends.local.runtime import BYTECODE_DIR, HF_CHECK_NAME, JAX_CACHE_DIR, LocalRuntime
from flows.common.paths import REHEARSAL_DIR, REPO_ROOT
from flows.config import load_profile
from flows.core.layout import Layout
from flows.core.planned_programs import planned_workloads
from flows.core.programs import TO_HUGGINGFACE


def test_every_program_uses_one_cache_beside_the_venvs_for_any_root(tmp_path: Path) -> None:
    dirs = set()
    for root in ("a", "b"):
        profile = load_profile("rehearsal", {"local.root": str(tmp_path / root)}, environ={})
        layout = Layout(profile)
        for name, workload in planned_workloads(profile, LocalRuntime(profile, layout)).items():
            env = dict(workload.env)
            assert env["JAX_PLATFORMS"] == "cpu", name
            assert env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] == "0", name  # all kept
            dirs.add(env["JAX_COMPILATION_CACHE_DIR"])
        expected = layout.venv_dir().parent / JAX_CACHE_DIR
    assert dirs == {str(expected)}


def test_programs_and_the_load_check_keep_bytecode_beside_the_venvs(tmp_path: Path) -> None:
    """Whatever the caller's PYTHONDONTWRITEBYTECODE, each program's imports are compiled once
    into one prefix beside the venvs (a uv-installed venv holds no .pyc of its own)."""
    profile = load_profile("rehearsal", {"local.root": str(tmp_path)}, environ={})
    layout = Layout(profile)
    runtime = LocalRuntime(profile, layout)
    expected = str(layout.venv_dir().parent / BYTECODE_DIR)
    workloads = [*planned_workloads(profile, runtime).values(), *runtime.setup("export").checks]
    for workload in workloads:
        env = dict(workload.env)
        assert env["PYTHONPYCACHEPREFIX"] == expected, workload.name
        assert env["PYTHONDONTWRITEBYTECODE"] == "", workload.name


def test_the_export_runs_the_converter_itself_and_keeps_its_small_compilations(tmp_path: Path) -> None:
    """The launcher runs MaxText's own to_huggingface module; MaxText is told the shared cache
    (its jax_cache_dir would otherwise win over the environment) and JAX keeps every program."""
    profile = load_profile("rehearsal", {"local.root": str(tmp_path)}, environ={})
    layout = Layout(profile)
    export = planned_workloads(profile, LocalRuntime(profile, layout))["export"]
    launcher = REHEARSAL_DIR / "to_huggingface_gc.py"
    assert export.argv[:2] == ("python3", str(launcher.relative_to(REPO_ROOT)))
    assert f'MODULE = "{TO_HUGGINGFACE}"' in launcher.read_text()
    env = dict(export.env)
    assert f"jax_cache_dir={env['JAX_COMPILATION_CACHE_DIR']}" in export.argv
    assert env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] == "0"


def test_only_the_load_check_runs_torch_on_one_thread(tmp_path: Path) -> None:
    """The check in the torch venv gets OMP_NUM_THREADS=1; the MaxText programs keep XLA's
    and TensorFlow's own thread settings (docs/decisions/0035-xla-compiles-once-per-program.md)."""
    profile = load_profile("rehearsal", {"local.root": str(tmp_path)}, environ={})
    runtime = LocalRuntime(profile, Layout(profile))
    [check] = runtime.setup("export").checks
    assert check.name == HF_CHECK_NAME and dict(check.env)["OMP_NUM_THREADS"] == "1"
    for name, workload in planned_workloads(profile, runtime).items():
        assert "OMP_NUM_THREADS" not in dict(workload.env), name
