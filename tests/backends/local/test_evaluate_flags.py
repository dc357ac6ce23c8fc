"""The evaluation program starts as train_rl does, under absl's app.run: its own options, then
train_rl's arguments through absl's flags (maxtext-v0.2.4 train_rl.py:843-844). Run in the
real rehearsal venv (the stand-in image), whose absl is the image's kind."""

from __future__ import annotations

import json
import subprocess

from flows.common.paths import REHEARSAL_DIR

PROBE = """
import json, sys
sys.path.insert(0, {dir!r})
import evaluate_rl
from absl import flags
args = evaluate_rl.parse_args(sys.argv)
print(json.dumps({{"out": args.out, "rest": args.train_rl_argv,
                   "parsed": flags.FLAGS.is_parsed(),
                   "alsologtostderr": flags.FLAGS.alsologtostderr}}))
"""


def _probe(rehearsal_image, *argv: str) -> subprocess.CompletedProcess[str]:
    python = str(rehearsal_image.venv_dir() / "bin" / "python")
    return subprocess.run([python, "-c", PROBE.format(dir=str(REHEARSAL_DIR)), *argv],
                          capture_output=True, text=True, timeout=300, check=False)


def test_train_rl_arguments_pass_through_absl_as_under_app_run(rehearsal_image) -> None:
    done = _probe(rehearsal_image, "--out", "gs://b/scores.json", "--",
                  "model_name=qwen3-0.6b", "--alsologtostderr", "num_batches=4")
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    # absl's own flag is taken by absl (as train_rl's would be), the config's key=value
    # arguments reach the program in order, and FLAGS are parsed for the libraries
    assert seen == {"out": "gs://b/scores.json", "rest": ["model_name=qwen3-0.6b",
                                                          "num_batches=4"],
                    "parsed": True, "alsologtostderr": True}


def test_an_unknown_flag_fails_as_train_rl_would(rehearsal_image) -> None:
    done = _probe(rehearsal_image, "--out", "x.json", "--", "model_name=m",
                  "--no_such_flag=1")
    assert done.returncode == 1
    assert "FATAL Flags parsing error" in done.stderr and "no_such_flag" in done.stderr


def test_restore_once_asks_maxtext_for_one_restore_and_keeps_a_given_value(
        rehearsal_image) -> None:
    """``--restore-once`` adds MaxText's ``load_checkpoint_only_once=true`` after the training's
    arguments; a value the arguments already give is theirs, not doubled."""
    done = _probe(rehearsal_image, "--restore-once", "--out", "x.json", "--", "model_name=m")
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1])["rest"] == [
        "model_name=m", "load_checkpoint_only_once=true"]
    given = _probe(rehearsal_image, "--restore-once", "--out", "x.json", "--", "model_name=m",
                   "load_checkpoint_only_once=false")
    assert given.returncode == 0, given.stderr[-2000:]
    assert json.loads(given.stdout.strip().splitlines()[-1])["rest"] == [
        "model_name=m", "load_checkpoint_only_once=false"]


def test_the_recorder_keeps_the_first_responses_with_their_question_and_summed_reward() -> None:
    """The reward functions called as MaxText 0.2.4's ``_compute_row_reward`` calls them
    (evaluate_rl.py: each function once per response, ``prompts=[prompt]``,
    ``completions=[resp]``, ``answer=[answer]``, ``question=question``): every sample's sum
    is recorded, the first KEPT_RESPONSES kept with their text, cut at KEPT_CHARS."""
    import sys

    sys.path.insert(0, str(REHEARSAL_DIR))
    import evaluate_rl

    recorder = evaluate_rl.RewardRecorder([lambda **kw: [1.0], lambda **kw: [0.5]])
    rows = evaluate_rl.KEPT_RESPONSES + 2
    for i in range(rows):
        for fn in recorder.wrapped:
            fn(prompts=[f"<p>{i}"], completions=["r" * (evaluate_rl.KEPT_CHARS + 1)],
               answer=["4"], question=f"q{i}")
    assert recorder.samples == [1.5] * rows
    assert len(recorder.responses) == evaluate_rl.KEPT_RESPONSES
    first = recorder.responses[0]
    assert first == {"question": "q0", "response": "r" * evaluate_rl.KEPT_CHARS, "reward": 1.5}


PREPARED = """
import gc, importlib.machinery, json, sys, weakref
sys.path.insert(0, {dir!r})
import evaluate_rl
evaluate_rl.prepare_cpu_rollout()
frozen = gc.get_freeze_count()
class Cycle:
    pass
made = Cycle(); made.me = made; gone = weakref.ref(made); del made
gc.collect()
print(json.dumps({{"enabled": gc.isenabled(), "frozen": frozen, "freed": gone() is None,
                   "stand_in": "maxtext.integration.vllm.maxtext_vllm_rollout" in sys.modules,
                   "imported": "maxtext.utils.model_creation_utils" in sys.modules,
                   "tensorflow": {{"installed": importlib.machinery.PathFinder.find_spec(
                                      "tensorflow") is not None,
                                  "refused": sys.modules.get("tensorflow", "") is None}}}}))
"""


def test_the_cpu_rollout_freezes_the_evaluations_imports_and_collects_what_follows(
        rehearsal_image) -> None:
    """Under ``--cpu-rollout`` the stand-in is installed and the imports of the evaluation
    (MaxText's model creation among them) are frozen out of the collector, which is on again
    and frees a cycle made after them, as Tunix's collections free what evaluating makes;
    TensorFlow, installed in the venv, is left unimported as in training."""
    python = str(rehearsal_image.venv_dir() / "bin" / "python")
    done = subprocess.run([python, "-c", PREPARED.format(dir=str(REHEARSAL_DIR))],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["enabled"] and seen["freed"] and seen["stand_in"] and seen["imported"], seen
    assert seen["frozen"] >= 100_000, seen  # the imports' objects, not a handful
    assert seen["tensorflow"] == {"installed": True, "refused": True}, seen
