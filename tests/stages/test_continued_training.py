"""A training that continues (flows/stages/train.py, flows/core/continuation.py), in
milliseconds: the real train and export stages, records and checks over a temporary
directory; the fake train program restores the newest checkpoint of its run directory as
train_rl does (tests/fakes/stage_backend.py). Every refusal's fix is applied as printed, and
the run that follows does what it said. The rehearsal e2e module proves the same with MaxText
(tests/e2e/test_rehearsal_e2e.py, the continued run)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from flows.core.continuation import lower_work_fix
from flows.core.failures import StageFailed
from flows.stages.train import SCHEDULE_FOLLOWS_LENGTH, SHORTER_THAN_SAVED
from tests.fakes.stage_backend import backend_at, local, run_all, statuses

CONTINUED = {"image": "skipped", "infra": "skipped", "convert": "skipped", "train": "ran",
             "export": "ran"}


def _refusal(root: Path, **overrides: str) -> StageFailed:
    with pytest.raises(StageFailed) as caught:
        run_all(backend_at(root, **overrides))
    assert caught.value.stage == "train"
    return caught.value


def _fix_settings(failure: StageFailed) -> list[dict[str, str]]:
    """Each `train.args.NAME: VALUE` alternative the fix text offers, as overrides."""
    return [{f"train.args.{name}": value} for name, value in
            re.findall(r"train\.args\.([\w.]+): (\d+)", failure.diagnosis.fix)]


def test_a_longer_run_whose_schedule_follows_its_length_is_refused_then_continues(
        tmp_path: Path) -> None:
    first = backend_at(tmp_path)  # the rehearsal: 2 batches, the schedule left to MaxText
    run_all(first)
    failure = _refusal(tmp_path, **{"train.args.num_batches": "3"})
    assert failure.diagnosis.code == SCHEDULE_FOLLOWS_LENGTH
    assert first.layout.run_name in failure.diagnosis.summary
    keep, fresh = _fix_settings(failure)
    assert keep == {"train.args.learning_rate_schedule_steps": "2"}
    assert fresh == {"train.args.learning_rate_schedule_steps": "3"}

    longer = backend_at(tmp_path, **{"train.args.num_batches": "3"}, **keep)
    outputs = run_all(longer)
    assert statuses(outputs) == CONTINUED
    assert longer.trained == [(2, 3)]  # one step, from the earlier run's checkpoint
    assert longer.layout.train_run_dir == first.layout.train_run_dir
    assert outputs["train"].details["continued"] == {
        "run": first.layout.run_name, "from_step": 2, "steps_trained": 1}
    assert outputs["train"].uris["actor_checkpoint"] == first.layout.actor_params(3)

    new = backend_at(tmp_path, **{"train.args.num_batches": "3"}, **fresh)
    assert statuses(run_all(new)) == CONTINUED
    assert new.trained == [(0, 3)]  # the other fix: a run of its own, from step 0
    assert new.layout.train_run_dir != first.layout.train_run_dir


def test_a_shorter_run_uses_its_saved_step_without_training(tmp_path: Path) -> None:
    schedule = {"train.args.learning_rate_schedule_steps": "4"}
    run_all(backend_at(tmp_path, **{"train.args.num_batches": "3"}, **schedule))
    shorter = backend_at(tmp_path, **{"train.args.num_batches": "2"}, **schedule)
    outputs = run_all(shorter)
    assert statuses(outputs) == CONTINUED and shorter.trained == []
    assert outputs["train"].uris["actor_checkpoint"] == shorter.layout.actor_params(2)
    assert outputs["train"].details["continued"] is None


def test_a_run_shorter_than_its_saved_steps_is_refused_naming_them(tmp_path: Path) -> None:
    """Only step 3 is kept (as orbax's max_to_keep leaves a run): train_rl would restore it
    for a run of 2, so the run of 2 is refused; its fix, applied, uses step 3 as it is."""
    schedule = {"train.args.learning_rate_schedule_steps": "4"}
    three = backend_at(tmp_path, **{"train.args.num_batches": "3"}, **schedule)
    run_all(three)
    for step in (1, 2):
        shutil.rmtree(local(three.layout.actor_checkpoints) / str(step))
    failure = _refusal(tmp_path, **{"train.args.num_batches": "2"}, **schedule)
    assert failure.diagnosis.code == SHORTER_THAN_SAVED
    assert "saved steps 3" in failure.diagnosis.summary
    assert "train.args.num_batches to a saved step (3)" in failure.diagnosis.fix
    again = backend_at(tmp_path, **{"train.args.num_batches": "3"}, **schedule)
    assert statuses(run_all(again))["train"] == "skipped" and again.trained == []


def test_a_run_stopped_early_continues_when_its_length_is_lowered(tmp_path: Path) -> None:
    """What a spend stop's fix asks (gke/watch/spend.py, its text from lower_work_fix): the
    run of 5 stopped with step 2 its newest; the same run with num_batches 4 and the
    schedule the fix names continues from step 2."""
    stopped = backend_at(tmp_path, **{"train.args.num_batches": "5"})
    stopped.damage.add("train-grpo")  # leaves steps 1-4 only
    with pytest.raises(StageFailed):
        run_all(stopped)
    shutil.rmtree(local(stopped.layout.actor_checkpoints) / "4")
    shutil.rmtree(local(stopped.layout.actor_checkpoints) / "3")
    said = lower_work_fix(stopped.profile.train.args)  # what the stop's fix line says
    (keep,) = [{f"train.args.{n}": v} for n, v in
               re.findall(r"train\.args\.([\w.]+): (\d+)", said)]
    assert keep == {"train.args.learning_rate_schedule_steps": "5"}
    # lowering the length alone is refused with the same setting
    failure = _refusal(tmp_path, **{"train.args.num_batches": "4"})
    assert _fix_settings(failure)[0] == keep
    lowered = backend_at(tmp_path, **{"train.args.num_batches": "4"}, **keep)
    assert statuses(run_all(lowered)) == CONTINUED
    assert lowered.trained == [(2, 4)]


@pytest.mark.parametrize("planted", ["not-a-number; rm -rf ~", 2.5, -3, True, None])
def test_a_run_card_that_is_no_whole_number_never_reaches_the_fix(tmp_path: Path,
                                                                   planted: object) -> None:
    """The bucket is untrusted: a card whose schedule is not a whole number above 0 is
    passed over, and the run trains from step 0 instead of printing what it says."""
    first = backend_at(tmp_path)
    run_all(first)
    card = local(first.layout.run_card)
    written = json.loads(card.read_text())
    card.write_text(json.dumps({**written, "schedule_steps": planted}))
    longer = backend_at(tmp_path, **{"train.args.num_batches": "3"})
    assert statuses(run_all(longer))["train"] == "ran" and longer.trained == [(0, 3)]
