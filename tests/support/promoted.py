"""Promoted runs on a real output root, judged by the real promotion rule over real exports
(flows/runpage/promotion.py ``promote_or_reject``), for the rollback tests."""

from __future__ import annotations

from pathlib import Path

from flows.config.profile import Profile
from flows.core.storage import LocalStorage, file_uri
from flows.runpage.promotion import promote_or_reject
from tests.support.scores import summary


def export(root: Path, run: str) -> str:
    """A small export of ``run`` under ``root``: its weights differ per run."""
    folder = root / "exports" / run
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.safetensors").write_bytes(run.encode() * 8)
    (folder / "config.json").write_text('{"model_type": "qwen3_moe"}')
    return file_uri(folder)


def judge(profile: Profile, root: Path, run: str, mean: float,
          score_key: str = "score-key") -> bool:
    """``run`` judged with mean reward ``mean`` (its base 0.1): True when promoted.
    ``score_key``: the held-out set its scores are recorded under (a watch on the
    promotion's set finds the champion's promotion score by the profile's real one)."""
    evaluation = {"trained": summary(mean).model_dump(), "base": summary(0.1).model_dump()}
    artifacts = {"hf_export": export(root, run), "trained_checkpoint": f"file:///c/{run}"}
    decision, _ = promote_or_reject(LocalStorage(), profile, run, evaluation, artifacts, None,
                                    "eval-key", score_key)
    return decision.promoted
