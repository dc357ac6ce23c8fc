"""A token found nowhere: the real flow on a real Prefect API, the real local backend running
real subprocesses that print the token every way a program could, and then every place it
could reach read back and searched (tests/e2e/test_flow_gke.py does the same for GKE).

The stages are stand-ins (the rehearsal's MaxText programs take minutes); the parts under test
are not: ``rl_post_training``, ``_execute``, the LocalBackend's streaming and diagnosis, the
run page, the events, Prefect's own logging of a failed task (its traceback and chained
cause), its state messages and persisted results, and the API database itself.

Two runs: the token from an environment variable (a probe prints it plain, as a Python repr
of os.environ, as JSON, as base64, split over two lines; then a program prints its
environment like ``env`` and dies with a traceback quoting it; a second token, which the
profile does not name, sits in HUGGING_FACE_HUB_TOKEN, inherited by the programs), and the
token from a Prefect Secret block with a trailing newline (as a file-sourced secret has),
where the stage code itself fails with an HTTP-style error whose URL carries the token.
"""

from __future__ import annotations

import base64
import json
import random
import string
import sys
from pathlib import Path
from typing import Any

import pytest

from flows import pipeline
from flows.backends.local.runtime import REHEARSAL_IMAGE
from flows.core.manifest import LOGS_DIR
from flows.core.secrets import resolve
from flows.core.stage import StageOutput
from flows.core.storage import join
from flows.core.workload import Placement, Workload
from tests.support.prefect_server import wait_until

pytestmark = pytest.mark.services

_RNG = random.SystemRandom()
TOKEN = "hf_" + "".join(_RNG.choice(string.ascii_letters) for _ in range(34))
BLOCK_TOKEN = "hf_" + "".join(_RNG.choice(string.ascii_letters) for _ in range(34))
AMBIENT = "".join(_RNG.choice(string.ascii_letters) for _ in range(30))  # no hf_ shape
TOKEN_VAR = "TPURL_LEAK_PROBE_TOKEN"  # no "__": not read as a profile override
BLOCK = "leak-probe-token"
FIVE_STAGES = {"eval": "", "promotion": "", "watch": ""}

# The run's log shows a program's warnings (and the lines that continue them) and only counts
# its other output (flows/core/program_log.py): the probes print as warnings so that every
# form of the token also goes through the Prefect log, not only the kept log file.
PROBE = r"""
import base64, json, os
t = os.environ["HF_TOKEN"]
print("WARNING: plain", t)
print("WARNING: repr", dict(os.environ))
print("WARNING: json", json.dumps(dict(os.environ)))
print("WARNING: b64", base64.b64encode(t.encode()).decode())
print("WARNING: split", t[:17])
print(" ", t[17:], "(end of split)")
hits = []
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            if t.encode() in f.read():
                hits.append(pid)
    except OSError:
        pass
print("WARNING: cmdline-hits", len(hits))
"""

DUMP_AND_DIE = r"""
import os
for key, value in sorted(os.environ.items()):
    print(f"WARNING: {key}={value}")
def login(env):
    raise PermissionError("401 Unauthorized for token " + env["HF_TOKEN"])
login(dict(os.environ))
"""


class ProgramStage:
    """Stands in for a Stage: runs one program through the real backend, or raises."""

    def __init__(self, name: str, program: str | None = None, raise_with_token: bool = False):
        self.name, self.program, self.raise_with_token = name, program, raise_with_token

    def execute(self, ctx: Any, upstream: Any) -> StageOutput:
        ref = ctx.profile.model.hf_token
        if self.raise_with_token:  # a library's HTTP error quoting the URL it called
            token = resolve(ref)
            raise RuntimeError(f"401 Client Error: Unauthorized for url: "
                               f"https://huggingface.co/api/whoami-v2?token={token}")
        uris: dict[str, str] = {}
        if self.program is not None:
            workload = Workload(name=f"{self.name}-probe", image=REHEARSAL_IMAGE,
                                argv=(sys.executable, "-c", self.program),
                                placement=Placement("cpu"), secret_env=(("HF_TOKEN", ref),))
            log = join(ctx.layout.root, self.name, LOGS_DIR, f"{workload.name}.log")
            ctx.backend.run_workload(workload, log)
            uris = {"log": log}
        status = "ran" if self.program is not None else "skipped"
        return StageOutput(stage=self.name, status=status, key=f"k-{self.name}",
                           fingerprint=f"f-{self.name}", uris=uris, duration_s=0.1)


def _stages(**kinds: ProgramStage) -> dict[str, ProgramStage]:
    stages = {name: ProgramStage(name) for name in ("image", "infra", "convert", "train",
                                                    "export")}
    return {**stages, **kinds}


def _variants(token: str) -> dict[str, str]:
    """What counts as the token: itself, without its newline, and encoded as a Secret's data,
    a JSON string and a Python repr hold it."""
    bare = token.strip()
    out = {"plain": bare, "base64": base64.b64encode(bare.encode()).decode(),
           "base64 with newline": base64.b64encode(token.encode()).decode().rstrip("="),
           "json": json.dumps(token)[1:-1]}
    return {k: v for k, v in out.items() if v}


def _read_everything(run_ids: list[Any], roots: list[Path]) -> dict[str, str]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, LogFilter, LogFilterFlowRunId
    from prefect.events.filters import EventFilter, EventNameFilter
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker
    from prefect.settings import (
        PREFECT_HOME,
        PREFECT_LOCAL_STORAGE_PATH,
        PREFECT_SERVER_DATABASE_CONNECTION_URL,
    )

    APILogWorker.drain_all(timeout=10)
    EventsWorker.drain_all(timeout=10)
    texts: dict[str, str] = {}
    with get_client(sync_client=True) as client:
        logs: list[str] = []
        while page := client.read_logs(log_filter=LogFilter(
                flow_run_id=LogFilterFlowRunId(any_=run_ids)), limit=200, offset=len(logs)):
            logs += [log.message for log in page]
        texts["prefect logs"] = "\n".join(logs)
        texts["flow runs"] = json.dumps([client.read_flow_run(i).model_dump(mode="json")
                                         for i in run_ids])
        tasks = client.read_task_runs(flow_run_filter=FlowRunFilter(id={"any_": run_ids}))
        texts["task runs"] = json.dumps([t.model_dump(mode="json") for t in tasks])
        texts["artifacts"] = json.dumps([a.model_dump(mode="json")
                                         for a in client.read_artifacts(limit=200)])

        def failed_events() -> list[Any] | None:
            page = client.read_events(filter=EventFilter(event=EventNameFilter(
                prefix=["tpurl.", "prefect.flow-run.", "prefect.task-run."])), limit=50)
            events = list(page.events)
            while page.next_page:
                page = client.read_events_page(str(page.next_page))
                events += page.events
            failed = [e for e in events if e.event == "tpurl.stage.failed"]
            return events if len(failed) >= len(run_ids) else None

        events = wait_until(failed_events, 60, "the runs' tpurl.stage.failed events")
        texts["events"] = json.dumps([e.model_dump(mode="json") for e in events])
    database = Path(str(PREFECT_SERVER_DATABASE_CONNECTION_URL.value()).split("///", 1)[-1])
    roots = [*roots, database.parent, Path(str(PREFECT_HOME.value())),
             Path(str(PREFECT_LOCAL_STORAGE_PATH.value()))]
    for root in roots:
        for path in (p for p in root.rglob("*") if p.is_file()) if root.is_dir() else ():
            texts[str(path)] = path.read_bytes().decode("latin-1")
    assert any(str(database) in where for where in texts), "the API database was not read"
    assert "[convert-probe]" in texts["prefect logs"]
    return texts


def test_the_token_is_found_nowhere_after_local_runs(
        prefect_api: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from prefect.blocks.system import Secret

    monkeypatch.setenv("TPURL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv(TOKEN_VAR, TOKEN)
    # a token the profile does not name, that the local backend's programs still inherit
    monkeypatch.setenv("HUGGING_FACE_HUB_TOKEN", AMBIENT)
    Secret(value=BLOCK_TOKEN + "\n").save(BLOCK, overwrite=True)
    root = tmp_path / "root"

    # 1. the token from the environment: printed every way, then an `env` dump and a traceback
    monkeypatch.setattr(pipeline, "STAGE_BY_NAME", _stages(
        convert=ProgramStage("convert", PROBE), train=ProgramStage("train", DUMP_AND_DIE)))
    env_run = pipeline.rl_post_training(profile="rehearsal", overrides={
        "local.root": str(root), "model.hf_token.env": TOKEN_VAR, **FIVE_STAGES},
        return_state=True)
    assert env_run.is_failed(), env_run
    # 2. the token from a Secret block (with its newline), quoted by the stage code's error
    monkeypatch.setattr(pipeline, "STAGE_BY_NAME", _stages(
        convert=ProgramStage("convert", raise_with_token=True)))
    block_run = pipeline.rl_post_training(profile="rehearsal", overrides={
        "local.root": str(root), "model.hf_token.secret_block": BLOCK, **FIVE_STAGES},
        return_state=True)
    assert block_run.is_failed(), block_run

    ids = [env_run.state_details.flow_run_id, block_run.state_details.flow_run_id]
    texts = _read_everything(ids, [root, tmp_path / "cache"])
    texts["failures"] = "\n".join(
        f"{state.message}\n{state.result(raise_on_failure=False)!r}"
        for state in (env_run, block_run))
    tokens = {"env token": TOKEN, "block token": BLOCK_TOKEN + "\n", "ambient token": AMBIENT}
    leaks = sorted({f"{label} ({what}) in {where}" for label, token in tokens.items()
                    for what, value in _variants(token).items()
                    for where, text in texts.items() if value in text})
    assert leaks == [], "the token leaked:\n" + "\n".join(leaks)
    # the search was not vacuous: the programs printed it, the flow saw and redacted it
    logs = texts["prefect logs"]
    assert "plain ***" in logs and "HF_TOKEN=***" in logs and "cmdline-hits 0" in logs, logs
    assert "HUGGING_FACE_HUB_TOKEN=***" in logs
    assert "split ***" in logs and "  *** (end of split)" in logs  # both pieces of it
    assert "401 Client Error" in logs
