"""Held promotions: a run that passed its promotion rule while a detector with policy ``hold``
fired waits here until a person clears it (`tpurl promote --clear RUN --reason TEXT`).

A hold is ``tpurl-results/<profile>/held/<run>.json`` beside the promoted pointer, in the
same storage: the model that would have been promoted (every field of its pointer entry),
the findings, and how long the promotion history was when it was held. Clearing appends that
entry to the history with a ``clearance`` (who, when, why, which detectors) and moves the
pointer, through the one writer every promotion uses (flows/core/promotion_store.py), then
marks the hold cleared; the record is kept, so who cleared what stays readable beside it.

Clearing is refused when the history grew since the hold (another model was promoted or
rolled back meanwhile: this run was judged against a champion that is no longer the one),
when the export's files changed since (the bucket is writable by every training pod), or
when the run name is not one this module wrote. Everything is checked before anything
changes.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from flows.config.profile import Profile
from flows.core.layout import RESULTS_DIR, Layout
from flows.core.lineage import outside_root
from flows.core.manifest import build_manifest, manifest_digest
from flows.core.promotion import Clearance, PromotedModel
from flows.core.promotion_store import read_history, write_promoted
from flows.core.storage import Storage, join

HELD_DIR = "held"
# a flow run's name (Prefect's adjective-animal, or what a caller named it): one path part
RUN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")


class HoldRefused(ValueError):
    """A clear that cannot be done; the message names the field and the fix."""


class HeldPromotion(BaseModel):
    """What waits: the entry the promotion would have written and why it did not."""

    run: str
    held_at: str
    findings: list[dict[str, object]] = Field(default_factory=list)
    candidate: PromotedModel
    reason: str  # the promotion decision's reason (it passed)
    decision: dict[str, object] = Field(default_factory=dict)  # as tpurl.model.* carry it
    history_size: int  # entries in promoted-history.json when it was held
    cleared: Clearance | None = None

    @property
    def detectors(self) -> list[str]:
        return [str(f.get("detector", "")) for f in self.findings]


def held_dir(profile: Profile) -> str:
    return join(Layout(profile).root, RESULTS_DIR, profile.name, HELD_DIR)


def hold_uri(profile: Profile, run: str) -> str:
    if not RUN_NAME.fullmatch(run):
        raise HoldRefused(f"RUN: {run!r} is not a run name (letters, digits, '.', '_' and "
                          "'-'); fix: name the run as `tpurl status PROFILE` lists it")
    return join(held_dir(profile), f"{run}.json")


def hold_promotion(storage: Storage, profile: Profile, candidate: PromotedModel,
                   findings: list[dict[str, Any]], decision: dict[str, Any]) -> HeldPromotion:
    """Record that ``candidate`` passed but waits for a person; the pointer is untouched."""
    held = HeldPromotion(run=candidate.run, held_at=datetime.now(UTC).isoformat(),
                         findings=findings, candidate=candidate,
                         reason=str(decision.get("reason", "")), decision=decision,
                         history_size=len(read_history(storage, profile)))
    storage.write_text(hold_uri(profile, candidate.run), held.model_dump_json(indent=1))
    return held


def read_hold(storage: Storage, profile: Profile, run: str) -> HeldPromotion | None:
    text = storage.read_text(hold_uri(profile, run))
    if not text:
        return None
    try:
        return HeldPromotion.model_validate_json(text)
    except ValidationError as exc:
        raise HoldRefused(f"RUN: the hold record of run {run} is unreadable "
                          f"({str(exc).splitlines()[0]}); fix: train the run again") from exc


def held_runs(storage: Storage, profile: Profile) -> list[HeldPromotion]:
    """The holds not yet cleared, oldest first; unreadable records are skipped (untrusted
    storage: a listing never fails for one bad file)."""
    out = []
    for uri in storage.files_under(held_dir(profile)):
        name = uri.rsplit("/", 1)[-1]
        if not name.endswith(".json"):
            continue
        try:
            held = HeldPromotion.model_validate_json(storage.read_text(uri) or "")
        except ValidationError:
            continue
        if held.cleared is None and f"{held.run}.json" == name:
            out.append(held)
    return sorted(out, key=lambda h: h.held_at)


def plan_clear(storage: Storage, profile: Profile, run: str, reason: str, by: str,
               verified: str = "", at: str | None = None) -> HeldPromotion:
    """Every check, read-only; the hold with its clearance filled in, ready to apply."""
    if not reason.strip():
        raise HoldRefused("--reason: empty; fix: say in a few words why the run may be "
                          "promoted (it is kept in the promotion history)")
    held = read_hold(storage, profile, run)
    if held is None:
        waiting = ", ".join(h.run for h in held_runs(storage, profile)) or "none"
        raise HoldRefused(f"RUN: run {run} has no held promotion in profile {profile.name} "
                          f"(held now: {waiting}); fix: name a held run")
    if held.cleared is not None:
        raise HoldRefused(f"RUN: run {run} was cleared already by {held.cleared.by} at "
                          f"{held.cleared.at}; fix: nothing to do")
    size = len(read_history(storage, profile))
    if size != held.history_size:
        raise HoldRefused(f"RUN: the promotion history changed since run {run} was held (a "
                          "promotion or rollback meanwhile), so it was judged against a "
                          "champion that is no longer the one; fix: run the training again "
                          "to judge it against today's champion")
    model = held.candidate
    # the record is read from storage every training pod can write: it names an export of
    # this profile's root with the digest it was held with, or nothing is promoted
    if why := outside_root({"model_uri": model.model_uri}, Layout(profile).root):
        raise HoldRefused(f"RUN: the hold record of run {run} is not to be trusted ({why}); "
                          "fix: train the run again")
    found = manifest_digest(build_manifest(storage, model.model_uri))
    if not model.export_digest or found != model.export_digest:
        raise HoldRefused(f"RUN: run {run}'s export {model.model_uri} changed since it was "
                          f"held (digest {found}, held as {model.export_digest}); fix: run "
                          "the training again")
    clearance = Clearance(by=by, at=at or datetime.now(UTC).isoformat(), reason=reason,
                          verified=verified, detectors=held.detectors, held_at=held.held_at)
    return held.model_copy(update={"cleared": clearance})


def apply_clear(storage: Storage, profile: Profile, planned: HeldPromotion) -> PromotedModel:
    """Promote the held model with its clearance (history, then pointer), then mark the hold
    cleared. A history that grew since the plan refuses first."""
    assert planned.cleared is not None
    if len(read_history(storage, profile)) != planned.history_size:
        raise HoldRefused("promoted-history.json: it changed while clearing; fix: run "
                          "`tpurl promote --clear` again to see why")
    entry = planned.candidate.model_copy(update={"clearance": planned.cleared,
                                                 "promoted_at": planned.cleared.at})
    write_promoted(storage, profile, entry)
    storage.write_text(hold_uri(profile, planned.run), planned.model_dump_json(indent=1))
    return entry


def held_lines(storage: Storage, profile: Profile) -> list[str]:
    """For `tpurl status` and the team view: each held run, what held it, how to clear it."""
    lines = []
    for held in held_runs(storage, profile):
        lines.append(f"held promotion: run {held.run} since {held.held_at} "
                     f"({', '.join(held.detectors) or 'no detector named'})")
        lines += [f"  step {f.get('step')}: {f.get('summary')}" for f in held.findings]
        lines.append(f"  clear: tpurl promote {profile.name} --clear {held.run} --reason "
                     "'...' (docs/how-to/held-run.md)")
    return lines
