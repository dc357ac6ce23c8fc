"""Issue 35.1, W&B end to end: MaxText's real ``train_rl`` on CPU (the rehearsal's image,
infra, convert and train stages through the local backend, as a run does) logs through
tunix's metrics logger to W&B in offline mode, and the run lands under the profile's
project, not tunix's default "tunix": the declared patch maxtext-wandb-project
(images/post-training/patches.yaml) passes WANDB_PROJECT to MetricsLoggerOptions
(tunix/sft/metrics_logger.py:189-197 at c4ec573d builds the WandbBackend from its
project_name). The key is a secret reference, and no file of the run carries it."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from flows.backends.local.backend import LocalBackend
from flows.config import load_profile
from flows.core.layout import Layout
from flows.core.stage import StageContext
from flows.core.storage import LocalStorage
from flows.stages import STAGE_BY_NAME
from tests.support.wandb_records import history, run_record

UPSTREAM = {"image": [], "infra": ["image"], "convert": ["image", "infra"],
            "train": ["image", "infra", "convert"]}  # as flows/pipeline.py wires them


def test_the_real_training_logs_to_the_profiles_wandb_project_offline(
        rehearsal_image: Layout, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key = os.urandom(20).hex()
    monkeypatch.setenv("WB_KEY_FOR_TEST", key)
    for name in ("WANDB_API_KEY", "WANDB_PROJECT", "WANDB_MODE", "WANDB_DIR"):
        monkeypatch.delenv(name, raising=False)
    profile = load_profile("rehearsal", {
        "local.root": str(tmp_path), "tracking.wandb.project": "grpo-rehearsal",
        "tracking.wandb.mode": "offline", "tracking.wandb.api_key.env": "WB_KEY_FOR_TEST"})
    layout, logger = Layout(profile), logging.getLogger("tpurl-test")
    outputs = {}
    for name, needs in UPSTREAM.items():
        backend = LocalBackend(profile, logger=logger, stage=name)
        ctx = StageContext(profile=profile, layout=layout, backend=backend,
                           storage=LocalStorage(), logger=logger)
        outputs[name] = STAGE_BY_NAME[name].execute(ctx, {n: outputs[n] for n in needs})
    assert outputs["train"].status == "ran"

    run_dir = Path(layout.train_run_dir.removeprefix("file://"))
    [run_file] = run_dir.glob("wandb/offline-run-*/run-*.wandb")
    run = run_record(run_file)
    assert (run.project, run.run_group) == ("grpo-rehearsal", layout.run_name)
    rows = [row for row in history(run_file) if any("/" in k for k in row)]
    steps = {int(float(row["_step"])) for row in rows if "_step" in row}
    assert rows and steps, history(run_file)
    logged = {k for row in rows for k in row if not k.startswith("_")}
    assert any("reward" in k for k in logged) and any("loss" in k for k in logged), logged
    written = [p for p in run_dir.rglob("*") if p.is_file()]
    assert not [p for p in written if key.encode() in p.read_bytes()]
