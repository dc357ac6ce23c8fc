"""The container wrapper, run for real with bash: exit status passes through, SIGTERM reaches
the program, the preamble runs first, non-leader hosts do nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from flows.backends.gke.jobs.command import container_command
from flows.core.workload import Placement, Workload
from flows.operations.plan import planned_workloads


def _workload(*argv: str, preamble: tuple[str, ...] = ()) -> Workload:
    return Workload(name="t", image="i", argv=argv, placement=Placement(kind="cpu"),
                    preamble=preamble)


@pytest.mark.parametrize(("argv", "code"), [
    (("sh", "-c", "exit 0"), 0),
    (("sh", "-c", "exit 3"), 3),
    (("sh", "-c", "echo 'quoted; $HOME `x`'"), 0),
])
def test_exit_status_passes_through(argv: tuple[str, ...], code: int):
    done = subprocess.run(container_command(_workload(*argv)), capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == code
    if "quoted" in argv[2]:
        assert done.stdout == "quoted; $HOME `x`\n"  # argv quoted once: no expansion


def test_preamble_exports_reach_the_program():
    done = subprocess.run(container_command(_workload(
        "sh", "-c", 'echo "$VLLM_ENABLE_V1_MULTIPROCESSING"',
        preamble=("export VLLM_ENABLE_V1_MULTIPROCESSING=0",))), capture_output=True, text=True,
        timeout=30)
    assert done.stdout.strip() == "0"


def test_sigterm_is_forwarded_to_the_program():
    program = ("import signal, sys, time\n"
               "signal.signal(signal.SIGTERM, lambda *a: sys.exit(7))\n"
               "print('ready', flush=True)\n"
               "time.sleep(30)\n")
    proc = subprocess.Popen(container_command(_workload(sys.executable, "-c", program)),
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    os.kill(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=20) == 7


def test_non_leader_hosts_exit_zero_without_running():
    command = container_command(_workload("sh", "-c", "exit 9"), leader_only=True)
    env = {**os.environ, "JOB_COMPLETION_INDEX": "3"}
    assert subprocess.run(command, env=env, capture_output=True, timeout=30).returncode == 0
    env["JOB_COMPLETION_INDEX"] = "0"
    assert subprocess.run(command, env=env, capture_output=True, timeout=30).returncode == 9


def test_every_rendered_command_is_valid_bash():
    from flows.backends.gke.jobs.manifests import render_all
    from tests.support.profiles import tutorial_profile

    for obj in render_all(tutorial_profile(), planned_workloads(tutorial_profile())):
        for rj in obj.get("spec", {}).get("replicatedJobs", []):
            for c in rj["template"]["spec"]["template"]["spec"]["containers"]:
                if "command" in c:
                    script = c["command"][2]
                    assert subprocess.run(["bash", "-n", "-c", script], timeout=30).returncode == 0
