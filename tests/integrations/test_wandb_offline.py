"""The training program's W&B settings, with the real wandb library in offline
mode: the run's metrics land in the offline run directory beside the training's outputs,
under the profile's entity, grouped by the pipeline's run, and the API key is in none of
the files, nor is anything the program prints (W&B's console capture is off)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from flows.backends import backend_for
from flows.config import load_profile
from flows.core.layout import Layout
from flows.core.programs import train_workload
from flows.core.secrets import resolve
from tests.support.wandb_records import history, run_record

# What tunix's metrics logger does through metrax's WandbBackend when wandb is importable
# (tunix/sft/metrics_logger.py:189-197 at c4ec573d: WandbBackend(project=project_name,
# name=run_name); google-metrax 0.2.4 metrax/logging/wandb_backend.py:57-58 wandb.init(project,
# name, anonymous="allow"), :70 wandb.log({event: value}, step=step), :76 wandb.finish()),
# with the project MaxText 0.2.4's train_rl leaves it ("tunix", MetricsLoggerOptions' default).
TRAINER = """
import wandb
wandb.init(project="tunix", name="2026-12-03_10-00-00", anonymous="allow")
for step, loss in ((1, 0.9), (2, 0.5), (3, 0.25)):
    wandb.log({"actor/train/loss": loss}, step=step)
    wandb.log({"rewards/train/mean": 1 - loss}, step=step)
wandb.finish()
"""


def test_the_training_programs_metrics_land_in_the_offline_run_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key = os.urandom(20).hex()
    monkeypatch.setenv("TPURL_LOCAL__ROOT", str(tmp_path))
    monkeypatch.setenv("WB_KEY_FOR_TEST", key)
    profile = load_profile("rehearsal", {
        "tracking.wandb.project": "grpo", "tracking.wandb.entity": "my-team",
        "tracking.wandb.mode": "offline", "tracking.wandb.api_key.env": "WB_KEY_FOR_TEST"})
    layout = Layout(profile)
    workload = train_workload(profile, layout, backend_for(profile).runtime)
    env = dict(workload.env)
    assert "WANDB_API_KEY" not in env  # a secret reference, resolved only at launch
    env.update({name: resolve(ref) for name, ref in workload.secret_env})  # as the backend does
    run_dir = Path(env["WANDB_DIR"])
    run_dir.mkdir(parents=True)  # MaxText made it: its TensorBoard writer starts first
    subprocess.run([sys.executable, "-c", TRAINER], env={**os.environ, **env}, check=True,
                   capture_output=True, timeout=300)

    [run_file] = run_dir.glob("wandb/offline-run-*/run-*.wandb")
    assert run_dir == Path(layout.train_run_dir.removeprefix("file://"))
    run = run_record(run_file)
    assert (run.entity, run.run_group, list(run.tags)) == ("my-team", layout.run_name, ["tpurl"])
    steps = {int(row["_step"]): row for row in history(run_file) if "actor/train/loss" in row}
    assert {s: float(r["actor/train/loss"]) for s, r in steps.items()} == {1: .9, 2: .5, 3: .25}
    written = [p for p in run_dir.rglob("*") if p.is_file()]
    assert written and not [p for p in written if key.encode() in p.read_bytes()]


# The same trainer, printing what a program may print: its environment's token, on stdout,
# on stderr, written to the file descriptors directly and through logging.
PRINTING_TRAINER = """
import logging, os, sys
import wandb
wandb.init(project="tunix", name="2026-12-03_10-00-00", anonymous="allow")
token = os.environ["PRINTED_TOKEN"]
print("loaded token", token, flush=True)
print("stderr token", token, file=sys.stderr, flush=True)
os.write(1, f"fd token {token}\\n".encode())
os.write(2, f"fd2 token {token}\\n".encode())
logging.getLogger("trainer").warning("logged token %s", token)
wandb.log({"actor/train/loss": 0.5}, step=1)
print("loaded token", token, flush=True)
wandb.finish()
"""


def test_what_the_training_program_prints_never_reaches_the_offline_runs_files(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    token = "hf" + "_" + os.urandom(17).hex()
    monkeypatch.setenv("TPURL_LOCAL__ROOT", str(tmp_path))
    profile = load_profile("rehearsal", {"tracking.wandb.project": "grpo",
                                         "tracking.wandb.mode": "offline"})
    layout = Layout(profile)
    env = dict(train_workload(profile, layout, backend_for(profile).runtime).env)
    assert env["WANDB_CONSOLE"] == "off"
    run_dir = Path(env["WANDB_DIR"])
    run_dir.mkdir(parents=True)
    done = subprocess.run([sys.executable, "-c", PRINTING_TRAINER], capture_output=True,
                          env={**os.environ, **env, "PRINTED_TOKEN": token}, check=True,
                          timeout=300)
    assert done.stdout.count(token.encode()) == 3  # the program's own output still has it
    [run_file] = run_dir.glob("wandb/offline-run-*/run-*.wandb")
    assert [float(r["actor/train/loss"]) for r in history(run_file) if "actor/train/loss" in r] \
        == [0.5]
    written = [p for p in run_dir.rglob("*") if p.is_file()]
    assert not [p for p in written if token.encode() in p.read_bytes()]
    assert not [p for p in written if p.name == "output.log"]
