"""A profile's ``watch`` section: how its champion is scored again after promotion, and what
a significant drop sets off.

A watch (flows/operations/watch.py) scores the champion with the evaluation program and
rewards that promoted it (flows/core/eval_programs.py), on the promotion's held-out set
unless ``files`` names a set of the team's own, and compares the score with a recorded one
(flows/core/watch_decision.py). Only a significant drop posts ``tpurl.model.regressed``.
Not run-tunable: a run's overrides must not loosen what counts as a regression.
"""

from __future__ import annotations

from pydantic import Field

from flows.config.section_base import StrictModel


class WatchSection(StrictModel):
    files: str | None = None
    """A held-out set of the team's own to watch on (parquet files, like eval.files); unset:
    the promotion's held-out set, where the champion's promotion score is the reference. Each
    watch first checks it: outside other teams' output roots, parquet with a question and an
    answer column, at least one row, at most 1 GiB altogether."""
    dataset_name: str | None = None
    """What the watched files hold, as MaxText names it (default: the training's)."""
    split: str = "train"
    """The split name the watched files are loaded under."""
    alpha: float = Field(0.05, gt=0.0, lt=0.5)
    """The chance, over every watch of one champion however many, that an unchanged champion
    is declared regressed (each watch spends a share of it)."""
    min_drop: float = Field(0.0, ge=0.0)
    """The smallest drop of the promotion metric that counts as a regression, however sure."""
    retrain: str | None = None
    """A retrain deployment (FLOW/NAME, e.g. rl-post-training/retrain-rehearsal): after a
    regression rolls the champion back, the newest dataset announced to it is announced
    again, so its dispatcher queues a retrain judged against the restored champion."""
