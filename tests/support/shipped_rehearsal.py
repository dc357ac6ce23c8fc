"""The shipped rehearsal profile's first run in an output root, as the e2e modules share it
(tests/e2e/conftest.py `shipped_rehearsal`): the rehearsal module's first run, and the
rehearsal a reader of the recipe tutorial ran before theirs."""

from __future__ import annotations

import os
from pathlib import Path

from flows.pipeline import rl_post_training
from flows.run.result import PipelineResult
from tests.support.profiles import fake_hf_token

# an HF token only this run carries, so every later check can look for leaks
CANARY = fake_hf_token("CanaryRehearsal")


def first_run(root: Path) -> PipelineResult:
    """Every stage of the shipped rehearsal, with the canary as its HF token."""
    os.environ["CANARY_HF_TOKEN"] = CANARY
    try:
        return rl_post_training(profile="rehearsal", overrides={
            "local.root": str(root), "model.hf_token.env": "CANARY_HF_TOKEN"})
    finally:
        os.environ.pop("CANARY_HF_TOKEN", None)
