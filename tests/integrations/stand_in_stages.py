"""Stage stand-ins for flow-level integration tests: the real flow on a real Prefect API,
each stage returning its output at once (as tests/runpage/test_live_page.py's do), so what
is tested is the flow's reporting, not MaxText."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from flows.core.stage import StageOutput
from tests.support.scores import summary

STEPS = [{"step": 1, "actor/train/loss": 0.9}, {"step": 2, "actor/train/loss": 0.4}]


class StandIn:
    def __init__(self, name: str, uris: dict[str, str], details: dict[str, Any] | None = None,
                 before: Callable[[], None] | None = None) -> None:
        self.name, self.uris, self.details, self.before = name, uris, details or {}, before

    def execute(self, ctx: Any, upstream: Any) -> StageOutput:
        if self.before is not None:
            self.before()
        return StageOutput(stage=self.name, status="ran", key=f"k-{self.name}",
                           fingerprint=f"f-{self.name}", uris=self.uris, details=self.details,
                           duration_s=1.5, chip_hours=0.0)


def stand_ins(root: Path, mean: float = 0.6,
              during_train: Callable[[], None] | None = None) -> dict[str, StandIn]:
    export = root / "export"
    export.mkdir(parents=True, exist_ok=True)
    (export / "model.safetensors").write_bytes(b"weights")
    run_dir = (root / "trained" / "rl-k").as_uri()
    return {"image": StandIn("image", {"image": "venv:.venvs/rehearsal"}),
            "infra": StandIn("infra", {}),
            "convert": StandIn("convert", {"maxtext_checkpoint": (root / "ckpt").as_uri()}),
            "train": StandIn("train", {"run_dir": run_dir, "actor_checkpoint": run_dir + "/2"},
                             {"metrics": {"steps": STEPS}}, during_train),
            "export": StandIn("export", {"hf_export": export.as_uri()}),
            "evaluate": StandIn("evaluate", {}, {"trained": summary(mean).model_dump(),
                                                 "base": summary(0.3).model_dump()})}
