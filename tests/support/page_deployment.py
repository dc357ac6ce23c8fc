"""docs/how-to/deploy-prefect-server.md's deploy, as written, on a fresh `prefect server start`:
the server and deployments that the e2e modules of the deployment page and of event-triggered
retraining (tests/e2e/test_flow_image.py, test_prefect_deploy.py) both use. One deploy per
session: `prefect deploy --all` builds and pushes the flow image once, as a user's first
deploy does; each module's runs are told apart by deployment and run id."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flows.common.paths import REPO_ROOT
from tests.support.flow_image import debian_base_image, deploy_env
from tests.support.prefect_server import QUICK_POLLING, PrefectServer, prefect_server_in
from tests.support.readme import blocks

PAGE = "how-to/deploy-prefect-server.md"


@dataclass
class Walkthrough:
    server: PrefectServer
    env: dict[str, str]
    repository: str
    base_image: str
    deploy_log: str
    deployments: dict[str, dict[str, Any]]
    home: Path


def page_bash(script: str, env: dict[str, str],
              timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """A block of the page, through bash as a user's terminal runs it, from the checkout."""
    return subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=REPO_ROOT, env=env,
                          text=True, capture_output=True, timeout=timeout, check=False)


@contextlib.contextmanager
def deployed_by_the_page(home: Path, registry_prefix: str) -> Iterator[Walkthrough]:
    """The page's deploy block (work pools, then `prefect --no-prompt deploy --all`) against a
    new server whose workers poll often, with the flow image built FROM the Debian base."""
    base = debian_base_image()
    with prefect_server_in(home, settings=QUICK_POLLING) as server:
        repository = f"{registry_prefix}/tpurl-flow"
        env = deploy_env(server.env, repository, base)
        done = page_bash(blocks(PAGE)["deploy"], env, timeout=1800)
        log = done.stdout + done.stderr
        assert done.returncode == 0, log[-4000:]
        found = server.api("POST", "/deployments/filter", json={}).json()
        yield Walkthrough(server, env, repository, base, log, {d["name"]: d for d in found},
                          home)
