"""The fit check's words, whole: one profile per kind of advice (a slice that may not fit, a
tight one, a rollout batch that decodes in waves, a rollout that cannot start, one that needs
more devices, a trainer that cannot train), each text compared with
tests/golden/fit/texts.json. What a user reads is the product's advice, so a changed word or
figure is a changed product: when the advice changes on purpose, regenerate the file
(``python -m tests.config.test_fit_texts``) and read the diff."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from flows.config import fit_rules
from flows.config.fit import Estimate, ParameterCount, Part, Side
from flows.config.fit_rules import fit_warning
from flows.config.loading import ProfileError, load_profile
from tests.support.profiles import required_overrides

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "fit" / "texts.json"
CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "slice-may-not-fit-and-rollout-waves": ("gemma3-12b-v6e-16", {
        "model.maxtext_name": "qwen3-0.6b", "train.args.rollout_micro_batch_size": 256}),
    "slice-tight": ("qwen3-30b-a3b-v6e-32", {
        "model.maxtext_name": "qwen3-30b-a3b", "train.args.train_micro_batch_size": 64,
        "train.args.batch_size": 64}),
    "rollout-cannot-start": ("qwen3-30b-a3b-v6e-32", {"model.maxtext_name": "qwen3-14b"}),
    # no replica holds the model on a quarter of the slice: a larger share, or a larger slice
    "rollout-needs-more-devices": ("qwen3-30b-a3b-v6e-32", {
        "model.maxtext_name": "qwen3-32b", "train.args.sampler_devices_fraction": 0.25,
        "train.args.trainer_devices_fraction": 0.75}),
    "no-estimate-no-warning": ("rehearsal", {}),  # a local profile: nothing to judge
    "trainer-cannot-train": ("smoke-qwen3-0.6b-v6e-8", {"model.maxtext_name": "qwen3-14b"}),
}


def said(profile: str, overrides: dict[str, Any]) -> dict[str, Any]:
    try:
        loaded = load_profile(profile, {**required_overrides(profile), **overrides}, environ={})
    except ProfileError as refused:
        return {"refused": [[i.field, i.problem, i.fix, i.category] for i in refused.issues]}
    return {"warning": fit_warning(loaded)}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_fit_checks_advice_is_word_for_word_what_it_was(case: str) -> None:
    assert said(*CASES[case]) == json.loads(GOLDEN.read_text())[case]


def _settings(clause: str) -> dict[str, str]:
    """``set a=b, c=d (why)`` → {a: b, c: d}."""
    named = clause.split("(")[0].strip().removeprefix("set ")
    return dict(pair.strip().split("=", 1) for pair in named.split(","))


def test_each_way_to_give_the_rollout_more_devices_loads_the_profile() -> None:
    """Both settings the refusal names (a larger share of this slice, a larger slice) are
    applied as written, and the profile they make loads: the fix works."""
    profile, overrides = CASES["rollout-needs-more-devices"]
    [[_field, _problem, fix, _code]] = said(profile, overrides)["refused"]
    options = fix.removeprefix("give the rollout more devices: ").split("; or ")
    assert len(options) == 2, fix
    for option in options:
        applied = {**overrides, **_settings(option)}
        assert "warning" in said(profile, applied), option


def _loaded(case: str) -> Any:
    profile, overrides = CASES[case]
    return load_profile(profile, {**required_overrides(profile), **overrides}, environ={})


def test_a_rollout_no_slice_holds_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where neither another split of this slice nor a larger slice holds the rollout, the
    fix says that no listed slice does, and names the two ways left."""
    monkeypatch.setattr(fit_rules, "split_changes", lambda profile: None)
    monkeypatch.setattr(fit_rules, "smallest_move", lambda profile, roomy=False: None)
    [[_field, _problem, fix, _code]] = said(*CASES["rollout-needs-more-devices"])["refused"]
    assert fix == ("no listed slice of this generation holds the rollout: set gke.num_slices "
                   "higher, or a smaller model.maxtext_name")


def test_a_batch_in_waves_without_a_replica_that_holds_it_names_more_devices(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The waves warning falls back to the profile's own split and slice moves when no
    replica on this slice's sampler devices holds the batch."""
    profile = _loaded("slice-may-not-fit-and-rollout-waves")
    check = fit_rules.rollout_check(profile)
    assert check is not None and check.given.verdict == "waves" and check.derived is not None
    monkeypatch.setattr(fit_rules, "rollout_check",
                        lambda _profile: dataclasses.replace(check, derived=None))
    warning = fit_rules.rollout_warning(profile)
    assert warning is not None
    assert warning.split("Lower train.args.rollout_micro_batch_size, or ")[1].startswith(
        "give the rollout more devices: set "), warning


def test_a_total_exactly_what_the_chips_hold_is_tight_not_past_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """100 % is "tight", not "may not fit" (only a share above 1 passes what the chips hold);
    with no roomier slice of the generation listed, the warning says to add slices."""
    gib = 2 ** 30
    trainer = Side("trainer", (Part("actor weights", gib, True), Part("activations", gib, False)),
                   chips=4, holds=2 * gib)
    est = Estimate(ParameterCount(1, 1), trainer, dataclasses.replace(trainer, role="rollout"))
    assert est.share == 1.0 and est.verdict == "tight"
    monkeypatch.setattr(fit_rules, "profile_estimate", lambda _profile: est)
    monkeypatch.setattr(fit_rules, "rollout_check", lambda _profile: None)
    monkeypatch.setattr(fit_rules, "smallest_move", lambda profile, roomy=False: None)
    warning = fit_warning(_loaded("slice-tight"))
    assert warning is not None
    assert "is tight on this slice: the conservative total is 100% of what" in warning, warning
    assert warning.endswith(", or set gke.num_slices higher (no listed slice of this "
                            "generation is roomier)"), warning


if __name__ == "__main__":
    GOLDEN.write_text(json.dumps({name: said(*case) for name, case in sorted(CASES.items())},
                                 indent=1, ensure_ascii=False) + "\n")
    sys.exit(0)
