"""A failed `tpurl run` prints its diagnosis once, with where the full log is; Prefect's
traceback goes to that log file, and to the terminal only for an internal error. Real `tpurl`
processes, each on its own private Prefect API."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from flows.common.paths import REPO_ROOT
from tests.support.profiles import TUTORIAL, TUTORIAL_REQUIRED

TPURL = str(Path(sys.executable).with_name("tpurl"))
SETS = [arg for k, v in TUTORIAL_REQUIRED.items() for arg in ("--set", f"{k}={v}")]

pytestmark = [pytest.mark.services, pytest.mark.realtime]  # a `tpurl run` with its own Prefect API


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k != "PREFECT_API_URL" and not k.startswith("GOOGLE_")}
    env.update({"PREFECT_SERVER_ANALYTICS_ENABLED": "false", "TPURL_CACHE_DIR": str(tmp_path),
                "HOME": str(tmp_path),  # no application-default credentials under ~/.config
                "CLOUDSDK_CONFIG": str(tmp_path / "gcloud"), "HF_TOKEN": "hf_" + "x" * 34})
    return env


def _full_log(out: str) -> Path:
    found = re.search(r"full log: (\S+)", out)
    assert found, out[-2000:]
    return Path(found.group(1))


def test_a_diagnosed_failure_is_one_message_and_the_traceback_is_in_the_log(tmp_path: Path):
    done = subprocess.run([TPURL, "run", TUTORIAL, *SETS], cwd=REPO_ROOT, env=_env(tmp_path),
                          capture_output=True, text=True, timeout=600, check=False)
    out = done.stdout + done.stderr
    assert done.returncode == 1, out[-3000:]
    assert "Traceback" not in out and "Encountered exception" not in out
    assert out.count("no Google credentials for the infra stage") == 1
    assert "run failed: [user-error]" in done.stderr and "fix: run `gcloud auth" in done.stderr
    log = _full_log(done.stderr)
    assert log.is_file() and "Traceback" in log.read_text()
    assert "Encountered exception during execution" in log.read_text()
    # the private API server's own output went to its file (TPURL_CACHE_DIR/logs), not here
    assert list((tmp_path / "logs").glob("api-server-*.log"))


INTERNAL = """
import sys
from prefect import flow
from flows import cli, pipeline

@flow(name="rl-post-training")
def broken(profile: str, overrides=None):
    raise RuntimeError("a bug of ours")

pipeline.rl_post_training = broken
sys.exit(cli.main(["run", "rehearsal", "--set", f"local.root={sys.argv[1]}"]))
"""


def test_an_internal_error_keeps_its_traceback_on_the_terminal(tmp_path: Path):
    # an output root of its own: the repository's may hold a finished rehearsal, which
    # `tpurl run` reports without running the flow (flows/console/finished.py)
    done = subprocess.run([sys.executable, "-c", INTERNAL, str(tmp_path / "out")],
                          cwd=REPO_ROOT, env=_env(tmp_path), capture_output=True, text=True,
                          timeout=600, check=False)
    out = done.stdout + done.stderr
    assert done.returncode == 1, out[-3000:]
    assert "Traceback" in out and "RuntimeError: a bug of ours" in out
    assert "run failed: [internal-error] RuntimeError: a bug of ours" in done.stderr
    assert "Traceback" in _full_log(done.stderr).read_text()


def test_a_configured_api_that_does_not_answer_is_one_message_before_anything_runs(
        tmp_path: Path) -> None:
    """Prefect failed the flow's start with 'Failed to reach API', which the CLI called an
    internal error (a bug of ours); the URL is the user's, and nothing had run."""
    import socket

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}/api"
    env = {**_env(tmp_path), "PREFECT_API_URL": url}
    done = subprocess.run([TPURL, "run", "rehearsal", "--set", f"local.root={tmp_path}/out"],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600,
                          check=False)
    out = done.stdout + done.stderr
    assert done.returncode == 1, out[-3000:]
    assert "Traceback" not in out and "internal-error" not in out
    assert f"run failed: [infrastructure] the Prefect API at {url}" in done.stderr
    assert "prefect server start" in done.stderr and "unset PREFECT_API_URL" in done.stderr
    assert not (tmp_path / "out").exists()  # nothing ran
