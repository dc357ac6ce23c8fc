"""What a watch records, and what it compares a champion's new score with (pure).

Each watch appends a :class:`WatchRecord` to ``watch-history.json`` beside the promoted
pointer (flows/core/watch_store.py): the champion's run, the set it was scored on (by its
score key: the same rows, program, arguments and image give the same key), the score with
its interval, and the verdict. The history is the evidence a reader looks at ("what happened
last night") and the state the sequential test needs: the number of earlier watches of this
champion on this set.

The reference a watch compares with, first found wins:

1. the set is the promotion's own held-out set (the champion's recorded ``score_key``): the
   champion's promotion score, the number it was promoted on;
2. the champion was watched on this set before: its first score there (its own level since
   it was first watched, so a slow drift is measured from where it started, not from last
   night);
3. the model a rollback would restore (the champion before this one) was watched on this set:
   its latest score there, so a new champion that is worse on the team's set than the model
   it replaced regresses on its first watch;
4. nothing: this watch records the champion's first score on the set (``baseline``) and
   judges nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field, field_validator

from flows.core.promotion import PromotedModel
from flows.core.scores import Interval, ScoreSummary

CHECKPOINT = "checkpoint"  # a record's source: the champion's checkpoint, scored
CANARY = "canary"  # the serving endpoint's answers, scored
UNJUDGED = ("baseline", "unreachable")  # verdicts that spend no share of alpha


class WatchSample(BaseModel):
    """One of the champion's responses on the watched set, next to its prompt and summed
    reward (shortened and redacted: flows/core/watch_samples.py). ``reward`` is None for a
    record that kept the prompt alone."""

    prompt: str
    response: str = ""
    reward: float | None = None


class WatchRecord(BaseModel):
    """One watch of one source: the champion's checkpoint, or the serving canary's answers
    (``source`` canary, ``served`` naming the model and endpoint), what was scored, against
    what, and the verdict. A canary's score is never a reference: the reference is always
    the checkpoint's (a served model is judged against the champion it should be)."""

    at: str  # ISO 8601, UTC
    champion_run: str
    model_uri: str
    set_key: str  # the score key of the watched set (flows/core/eval_programs.py score_key)
    set_name: str  # for people: "the promotion's held-out set" or the files
    metric: str
    scores: ScoreSummary
    verdict: str  # regressed | holds | inconclusive | baseline | unreachable (canary only)
    reason: str
    reference: Interval | None = None
    reference_source: str = ""
    watch_number: int = 1
    z: float = 0.0
    threshold: float = 0.0
    alpha_spent: float = 0.0
    samples: list[WatchSample] = Field(default_factory=list)  # a few of the responses
    flow_run: str = ""  # the watch's flow run, when it ran as one
    source: str = CHECKPOINT  # checkpoint | canary (a record from before canaries: checkpoint)
    served: str = ""  # a canary's "MODEL at ENDPOINT"

    @field_validator("samples", mode="before")
    @classmethod
    def _prompts_alone(cls, value: Any) -> Any:
        """A record written when samples were prompts alone (strings) still reads: the
        history is kept, not restarted, across that change."""
        if isinstance(value, list):
            return [{"prompt": v} if isinstance(v, str) else v for v in value]
        return value


@dataclass(frozen=True)
class Reference:
    interval: Interval
    source: str  # which of the four rules, in words, with the run it came from


def watch_number(records: list[WatchRecord], champion_run: str, set_key: str,
                 source: str = CHECKPOINT) -> int:
    """This watch's number for the champion on the set, from this source: earlier judged
    watches + 1. Every judged watch of that run counts, across its reigns, so a champion
    restored by a rollback does not get a fresh budget of false alarms. The canary counts
    its own: it spends its own ``alpha`` (it sets off no rollback, decision 0042)."""
    return 1 + sum(1 for r in records if r.champion_run == champion_run
                   and r.set_key == set_key and r.source == source
                   and r.verdict not in UNJUDGED)


def choose_reference(champion: PromotedModel, previous: PromotedModel | None,
                     records: list[WatchRecord], set_key: str,
                     metric: str) -> Reference | None:
    """The reference of the module's docstring's rules (None: this watch is a baseline),
    from the checkpoint's records only."""
    records = [r for r in records if r.source == CHECKPOINT]
    if champion.score_key and champion.score_key == set_key:
        return Reference(getattr(champion.scores, metric),
                         f"run {champion.run}'s promotion score on this set")
    own = [r for r in records if r.champion_run == champion.run and r.set_key == set_key]
    if own:
        return Reference(getattr(own[0].scores, metric),
                         f"run {champion.run}'s first watch on this set ({own[0].at})")
    if previous is not None:
        before = [r for r in records if r.champion_run == previous.run and r.set_key == set_key]
        if before:
            return Reference(getattr(before[-1].scores, metric),
                             f"run {previous.run}'s latest watch on this set "
                             f"({before[-1].at}), the model a rollback restores")
    return None
