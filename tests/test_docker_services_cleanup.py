"""`scripts/docker-services.sh stop` leaves nothing mounted under its directory: a CI run
once left dockerd's `exec/netns/default` mounted under the clone, which then could not be
removed. The leftover is made for real (a tmpfs mounted where dockerd puts its netns)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from flows.common.paths import REPO_ROOT
from tests.support.tmpfs import mounted_tmpfs


def _mounted_under(directory: Path) -> list[str]:
    prefix = f"{directory}/"
    return [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()
            if line.split()[1].startswith(prefix)]


def test_stop_unmounts_what_was_left_under_its_directory(tmp_path: Path) -> None:
    docker_dir = tmp_path / "docker"
    netns = docker_dir / "exec" / "netns" / "default"
    outside = tmp_path / "not-ours"
    with mounted_tmpfs(netns, "size=1m"), mounted_tmpfs(outside, "size=1m"):
        (netns / "inner").mkdir()
        with mounted_tmpfs(netns / "inner", "size=1m"):
            assert len(_mounted_under(docker_dir)) == 2
            done = subprocess.run(
                ["bash", str(REPO_ROOT / "scripts" / "docker-services.sh"), "stop"],
                env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
                     "TPURL_DOCKER_DIR": str(docker_dir)},
                capture_output=True, text=True, timeout=60)
            assert done.returncode == 0, done.stderr
            assert _mounted_under(docker_dir) == []
            assert _mounted_under(tmp_path) == [str(outside)]  # only what is under its dir
    subprocess.run(["rm", "-rf", str(docker_dir)], check=True)  # removable now
