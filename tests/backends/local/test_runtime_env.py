"""The rehearsal's MaxText programs share JAX's persistent compilation cache beside the venvs,
whatever the output root, so a rerun reuses what XLA compiled before."""

from __future__ import annotations

from pathlib import Path

from flows.backends.local.runtime import JAX_CACHE_DIR, LocalRuntime
from flows.config import load_profile
from flows.core.layout import Layout
from flows.core.programs import planned_workloads


def test_every_program_uses_one_cache_beside_the_venvs_for_any_root(tmp_path: Path) -> None:
    dirs = set()
    for root in ("a", "b"):
        profile = load_profile("rehearsal", {"local.root": str(tmp_path / root)}, environ={})
        layout = Layout(profile)
        for name, workload in planned_workloads(profile, LocalRuntime(profile, layout)).items():
            env = dict(workload.env)
            assert env["JAX_PLATFORMS"] == "cpu", name
            dirs.add(env["JAX_COMPILATION_CACHE_DIR"])
        expected = layout.venv_dir().parent / JAX_CACHE_DIR
    assert dirs == {str(expected)}
