"""A deployment's flow run executed as a process worker executes it: ``python -m
prefect.engine`` with ``PREFECT__FLOW_RUN_ID`` (prefect 3.9.1 prefect/workers/process.py line
99), in the repository (prefect.yaml's pull step sets that working directory)."""

from __future__ import annotations

import os
import subprocess
import sys


def execute_as_a_worker(run_id: str) -> subprocess.Popen[str]:
    from prefect.settings import PREFECT_API_URL

    from flows.common.paths import REPO_ROOT

    env = {**os.environ, "PREFECT_API_URL": str(PREFECT_API_URL.value()),
           "PREFECT__FLOW_RUN_ID": run_id}
    return subprocess.Popen([sys.executable, "-m", "prefect.engine"], cwd=REPO_ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
