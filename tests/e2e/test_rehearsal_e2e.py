"""The rehearsal end to end, for real: the MaxText programs on CPU through the Prefect flow.

One first run (cold outputs; the venvs are built on first use and reused; the session's,
which the recipe tutorial's runs follow in the same root after this module), then reruns
that prove skip-if-done: nothing changed → every stage skipped; a team's dataset processor
and reward → train, export and evaluate only, then the same training asked for one step more
continues that run (refused first with the schedule that continues it); a changed base model
→ infra and convert again (then a train given a bad value fails at once with its cause). The
first run also evaluates (MaxText's evaluate_rl on the held-out rows, trained and base) and
decides promotion; the continued and base-model reruns leave eval out (its lineage is proven
in tests/stages/test_evaluate.py), since each evaluation program costs minutes on CPU.

The team's rerun is two proofs on one training, each of which needs a real train_rl: its
dataset processor is the one MaxText loads, and its reward pays every completion alike so the
sentinel holds its promotion. It keeps the shipped learning rate and schedule, so its
programs are the first run's, compiled once (JAX's persistent cache): a learning rate is a
constant of the compiled train step, and that a changed one reruns only train and export is
tests/stages/test_execute.py's. The continued run also tracks to W&B in offline mode: its
train program is MaxText's real ``train_rl`` through tunix's metrics logger, so the W&B proof
needs no training of its own. Tracking enters no stage's key (flows/core/layout.py
train_key), so the continued run, tracked, is the untracked team's training, and its W&B run
is the only one in the run's directory.
"""

from __future__ import annotations

import json
import math
import os
import re
import statistics
from pathlib import Path
from typing import NamedTuple
from urllib.parse import urlparse

import pytest

from flows.config import load_profile
from flows.config.profile import Profile
from flows.core.failures import StageFailed
from flows.core.layout import Layout
from flows.core.promotion import PromotedModel
from flows.pipeline import rl_post_training
from flows.run.result import PipelineResult
from tests.support.results import stage_statuses
from tests.support.shipped_rehearsal import CANARY
from tests.support.wandb_records import history, run_record

NO_EVAL = {"eval": "", "promotion": "", "watch": ""}  # reruns about train/convert lineage only

pytestmark = pytest.mark.rehearsal


def _path(uri: str) -> Path:
    return Path(urlparse(uri).path)


@pytest.fixture(scope="module")
def root(rehearsal_root: Path) -> Path:
    """The session's rehearsal root: its first run is this module's and proves a cold start
    (the recipe tutorial, which runs in it too, runs after this module: tests/support/tiers.py)."""
    return rehearsal_root


@pytest.fixture(scope="module")
def first_run(shipped_rehearsal: PipelineResult) -> PipelineResult:
    """The first run (tests/support/shipped_rehearsal.py) carries a canary HF token, so every
    later check can look for leaks."""
    return shipped_rehearsal


def test_first_run_produces_all_three_artifacts(first_run: PipelineResult):
    statuses = stage_statuses(first_run)
    assert [s.stage for s in first_run.stages] == ["image", "infra", "convert", "train", "export",
                                                   "evaluate"]
    assert all(statuses[s] == "ran" for s in ("infra", "convert", "train", "export", "evaluate"))
    artifacts = first_run.artifacts
    assert set(artifacts) == {"maxtext_checkpoint", "trained_checkpoint", "hf_export"}
    assert _path(artifacts["maxtext_checkpoint"]).name == "items"
    assert any(_path(artifacts["maxtext_checkpoint"]).iterdir())
    assert _path(artifacts["trained_checkpoint"]).match("checkpoints/actor/2/model_params")
    export = _path(artifacts["hf_export"])
    assert (export / "config.json").is_file() and (export / "tokenizer.json").is_file()
    index = export / "model.safetensors.index.json"
    shards = (set(json.loads(index.read_text())["weight_map"].values()) if index.exists()
              else {"model.safetensors"})
    assert all((export / shard).exists() for shard in shards)
    for stage in first_run.stages[1:]:
        assert stage.workloads, f"{stage.stage} ran programs"
        for run in stage.workloads:
            assert _path(run.log_uri).is_file()
    # training and evaluation leave TensorFlow out (images/rehearsal/train_rl_cpu.py
    # leave_tensorflow_out): neither `datasets` finds it nor does its runtime start
    for stage in (s for s in first_run.stages if s.stage in ("train", "evaluate")):
        for run in stage.workloads:
            log = _path(run.log_uri).read_text(errors="replace")
            assert "TensorFlow version" not in log and "tensorflow/core" not in log, run.name


def test_export_loads_in_transformers_and_differs_from_the_base(first_run):
    export = next(s for s in first_run.stages if s.stage == "export")
    record = json.loads((_path(export.uris["hf_export"]) / "tpurl-lineage.json").read_text())
    check = record["details"]["load_check"]
    assert check["architecture"] == "Qwen3MoeForCausalLM"
    assert check["tensors_changed"] > 0
    assert check["tensors_total"] >= check["tensors_changed"]


def test_grpo_ran_two_steps_with_varying_rewards(first_run):
    steps = first_run.metrics["steps"]
    assert len(steps) >= 2, first_run.metrics
    reward_tags = [t for t in first_run.metrics["tags"] if "reward" in t.lower()]
    assert reward_tags, first_run.metrics["tags"]
    # the recipe's function, served through the guard under its own name (functools.wraps),
    # is logged by Tunix as its own tag and named in the result
    assert first_run.recipe["reward_functions"] == ["ascii_fraction_reward"], first_run.recipe
    assert "rewards/train/ascii_fraction_reward" in reward_tags, reward_tags
    for step in steps:
        for key, value in step.items():
            if key != "step" and value is not None:
                assert math.isfinite(value)
    spread = [t for t in reward_tags if any(w in t.lower() for w in ("std", "max", "min"))]
    assert spread, reward_tags
    observed = [step[t] for step in steps for t in spread if step.get(t) is not None]
    assert any(v != 0 for v in observed) or statistics.pstdev(observed) > 0
    assert first_run.health == []  # the rehearsal's own reward: no detector fires


def test_evaluation_scores_both_models_and_decides_promotion(first_run, root):
    from flows.config import load_profile
    from flows.core.promotion_store import read_promoted
    from flows.core.storage import LocalStorage

    evaluation = first_run.evaluation
    assert evaluation is not None
    evaluate = next(s for s in first_run.stages if s.stage == "evaluate")
    assert [w.name for w in evaluate.workloads] == ["evaluate-base", "evaluate-trained"]
    for which in ("trained", "base"):
        scores = json.loads((_path(evaluate.uris["scores" if which == "trained" else
                                                  "base_scores"]) / "scores.json").read_text())
        # eval.batches 2 of the 4 rows MaxText holds out of 64, none of them trained on
        assert scores["total"] == 2 and scores["overlap"] == 0
        assert scores["trained_rows_checked"] == 2
        assert math.isclose(scores["mean_reward"], statistics.mean(scores["rewards"]))
        # both models judged by the recipe's function (through its guard), not MaxText's own
        assert scores["reward_functions"] == ["ascii_fraction_reward"], scores
        summary = evaluation[which]
        assert summary["samples"] == 2
        assert summary["mean_reward"]["low"] <= summary["mean_reward"]["value"] <= \
            summary["mean_reward"]["high"]
    assert evaluation["base"]["checkpoint"].rstrip("/") == \
        _path(first_run.artifacts["maxtext_checkpoint"]).as_posix()
    decision = evaluation["decision"]
    assert decision["reference_kind"] == "base"  # nothing was promoted in this root before
    profile = load_profile("rehearsal", {"local.root": str(root)}, environ={})
    pointer = read_promoted(LocalStorage(), profile)
    if decision["promoted"]:
        assert pointer is not None and pointer.model_uri == first_run.artifacts["hf_export"]
    else:  # a random tiny model may well score below its base: then nothing moves
        assert pointer is None


def _scores_of(first_run: PipelineResult, which: str) -> dict:
    evaluate = next(s for s in first_run.stages if s.stage == "evaluate")
    key = "scores" if which == "trained" else "base_scores"
    return json.loads((_path(evaluate.uris[key]) / "scores.json").read_text())


def test_a_watch_with_the_real_program_rolls_back_a_regressed_champion(first_run, root,
                                                                        tmp_path):
    """The watch's loop with the real evaluation program, once. Of the first run's two real
    checkpoints (its base and its trained model, both scored by its evaluate stage on the
    same two held-out rows), the one that scored lower there is B, the champion watched; the
    other is A. The watch set is those two rows, cut from the run's own dataset file. A is
    promoted first, B over it on B's real promotion score (A's promotion score and the base's
    are recorded below it); A's watch on the set is its real score from the evaluate stage (the same rows,
    program and greedy decode a watch of it runs). Then `run_watch` scores B with the real
    program (one evaluation): B regressed against A, the event reaches the session's Prefect
    API with the real responses as evidence, and the rollback flow run on that event restores
    A. A watch of A then holds: its scores are the evaluate stage's own (a second evaluation
    would cost as much again). A profile of its own name in the run's root: the shipped
    profile's pointer, which later tests read, is not touched. The same evaluation also
    scores a serving canary: the program sends the two rows' prompts to an OpenAI-protocol
    server in this process and scores its answers with the training's rewards (a second
    scoring pass, no second model build)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    from prefect.client.orchestration import get_client

    from flows.core.eval_programs import score_key
    from flows.core.scores import ScoresFile, summarize
    from flows.core.storage import LocalStorage
    from flows.core.watch_record import WatchRecord
    from flows.core.watch_store import append_watch, read_watches
    from flows.operations.rollback_flow import rollback_flow
    from flows.operations.watch import program_scorer, run_watch, watched_profile
    from flows.runpage.promotion import promote_or_reject, read_promoted
    from tests.support.openai_server import openai_server
    from tests.support.prefect_server import wait_until
    from tests.support.promoted import export

    shipped = load_profile("rehearsal", {"local.root": str(root)}, environ={})
    runs = {"trained": (_scores_of(first_run, "trained"),
                        first_run.artifacts["trained_checkpoint"],
                        first_run.artifacts["hf_export"]),
            "base": (_scores_of(first_run, "base"), first_run.artifacts["maxtext_checkpoint"],
                     export(tmp_path, "base"))}
    [b_kind, a_kind] = sorted(runs, key=lambda k: runs[k][0]["mean_reward"])
    (a_scores, a_ckpt, a_export), (b_scores, b_ckpt, b_export) = runs[a_kind], runs[b_kind]
    assert a_scores["mean_reward"] > b_scores["mean_reward"], (
        "the first run's trained and base models scored alike on the held-out rows: no drop "
        f"to watch for ({a_scores['rewards']} vs {b_scores['rewards']})")
    table = pq.read_table(_path(Layout(shipped).dataset_file))
    rows = table.filter(pc.is_in(table["problem"], value_set=pa.array(b_scores["questions"])))
    assert set(rows["problem"].to_pylist()) == set(b_scores["questions"])
    watch_set = tmp_path / "watch-set.parquet"
    pq.write_table(rows, watch_set)
    answers = dict(zip(rows["problem"].to_pylist(), rows["expected_answer"].to_pylist(),
                       strict=True))

    def served_answer(prompt: str) -> str:
        return next((f"The answer is {a}." for q, a in answers.items() if q in prompt), "no")

    with openai_server(model="served-champion", answer=served_answer) as served:
        profile_file = tmp_path / "rehearsal-watched.yaml"
        # alpha 0.2: two rows a side give a wide interval; the first watch tests at z > 1.17;
        # the serving canary: a server in this process (tests/support/openai_server.py), asked
        # by the real program in the same evaluation, answering each row's expected answer
        profile_file.write_text(f"extends: rehearsal\nlocal:\n  root: {root}\n"
                                f"watch:\n  files: {watch_set}\n  alpha: 0.2\n"
                                f"  canary:\n    endpoint: {served.url}\n"
                                "    model: served-champion\n    prompts: 2\n")
        profile = load_profile(str(profile_file))
        storage = LocalStorage()
        key = score_key(profile)
        b_summary = summarize(ScoresFile.model_validate(b_scores))

        def below(by: float):
            mean = b_summary.mean_reward
            return b_summary.model_copy(update={"mean_reward": mean.model_copy(update={
                "value": mean.value - by, "low": mean.low - by, "high": mean.high - by})})

        for run, ckpt, exported, trained in (("run-a", a_ckpt, a_export, below(0.1)),
                                             ("run-b", b_ckpt, b_export, b_summary)):
            decision, _ = promote_or_reject(
                storage, profile, run, {"trained": trained.model_dump(),
                                        "base": below(0.2).model_dump()},
                {"hf_export": exported, "trained_checkpoint": ckpt}, None, "eval-key", key)
            assert decision.promoted, decision.reason
        set_key = score_key(watched_profile(profile)[0])
        a_summary = summarize(ScoresFile.model_validate(a_scores))
        append_watch(storage, profile, WatchRecord(
            at="2026-12-01T02:00:00+00:00", champion_run="run-a", model_uri=a_export,
            set_key=set_key, set_name="the watch set", metric="mean_reward", scores=a_summary,
            verdict="baseline", reason="the evaluate stage's score of run-a on these rows"))

        outcome = run_watch(storage, profile, program_scorer)
        record = outcome.record
        assert record.verdict == "regressed" and outcome.posted, outcome.lines()
        assert "run run-a's latest watch" in record.reference_source
        # greedy decoding: the champion's rows score as they did in the evaluate stage
        assert record.scores.mean_reward.value == pytest.approx(b_summary.mean_reward.value)
        kept = {(r["question"], r["response"]) for r in b_scores["responses"]}
        assert record.samples and all((s.prompt, s.response) in kept for s in record.samples)
        # the canary: the program sent the set's two prompts (templated as the rollout's)
        # to the server and scored its answers with the same rewards, in the same evaluation
        asked = served.requests()
        canary = outcome.canary
        assert canary is not None and canary.verdict != "unreachable", canary
        assert {q for q in answers if any(q in s.body["prompt"] for s in asked)} == set(answers)
        assert canary.scores.samples == 2 and canary.served.startswith("served-champion at ")
        assert {s.response for s in canary.samples} <= {f"The answer is {a}." for a in
                                                        answers.values()}

    def regressed() -> list[dict]:
        with get_client(sync_client=True) as client:
            found = client.request("POST", "/events/filter", json={
                "limit": 5, "filter": {"event": {"name": ["tpurl.model.regressed"]},
                                       "resource": {"id": ["tpurl.model.rehearsal-watched"]}}})
        return found.json()["events"]

    # the server stores an event a moment after it accepts it
    [event] = wait_until(regressed, 60, "the watch's regressed event")
    evidence = event["payload"]["evidence"]
    assert event["payload"]["run"] == "run-b" and evidence["set"] == f"watch.files {watch_set}"
    assert [s["response"] for s in evidence["samples"]] == [s.response for s in record.samples]
    lines = rollback_flow(profile=str(profile_file), reason=f"regression announced in event "
                          f"{event['id']}", regressed_run="run-b",
                          event_resource={k: event["resource"][k] for k in (
                              "prefect.resource.id", "tpurl.profile")})
    assert any("-> run run-a" in line for line in lines), lines
    assert any("event tpurl.model.rolled-back on the Prefect API" in line for line in lines)
    champion = read_promoted(storage, profile)
    assert champion is not None and champion.run == "run-a"

    def recorded(scoring, champion, out) -> ScoresFile:
        assert champion.run == "run-a" and champion.trained_checkpoint == a_ckpt
        return ScoresFile.model_validate(a_scores)

    again = run_watch(storage, profile, recorded)
    assert again.record.verdict == "holds" and not again.posted, again.lines()
    assert [(r.champion_run, r.verdict) for r in read_watches(storage, profile)
            if r.source == "checkpoint"] == [
        ("run-a", "baseline"), ("run-b", "regressed"), ("run-a", "holds")]


def test_the_run_s_benchmarks_read_it(first_run, root, tmp_path):
    """The quick runs of benchmarks/evaluation.py (this run's persisted result) and of
    benchmarks/stage_profile.py --reparse (its programs' walls and logs): milliseconds each,
    on the run this module already paid for."""
    from tests.support.benchmarks import assert_figures, run_quick

    def started_at(path: Path) -> object:
        try:
            return PipelineResult.model_validate_json(path.read_text()).started_at
        except ValueError:  # the promoted pointer, its history: not results
            return None

    persisted = next(p for p in sorted((root / "tpurl-results").rglob("*.json"))
                     if started_at(p) == first_run.started_at)
    out = run_quick("evaluation", str(persisted), timeout=120)
    assert_figures(out, "stages before evaluate:", "evaluate-base:", "evaluate-trained:",
                   "tutorial (qwen3-30b-a3b-v6e-32), by estimate:")
    saved = tmp_path / "walls.json"
    saved.write_text(json.dumps({f"{w.name} wall": w.wall_s for s in first_run.stages
                                 if s.stage in ("train", "export", "evaluate")
                                 for w in s.workloads}))
    out = run_quick("stage_profile", "--root", str(root), "--reparse", str(saved), timeout=120)
    assert_figures(out, "program", "train-grpo", "export-maxtext-to-hf", "evaluate-trained")


def test_the_export_benchmark_exports_the_run(first_run, root):
    """benchmarks/export.py's quick run: this checkout's export workloads, as its code builds
    them, the converter run once on this run's actor checkpoint and tiny model; the export
    holds its weights (the benchmark exits 1 otherwise)."""
    from tests.support.benchmarks import assert_figures, run_quick

    out = run_quick("export", "--quick", "--inputs", str(root), timeout=1800)
    assert_figures(out, "round 1 after", "export-maxtext-to-hf wall s", "median over 1 round(s)")


def test_the_venv_installed_without_resolving_misses_no_requirement(first_run,
                                                                   rehearsal_image):
    """The lock goes in with ``--no-deps`` (tensorflow-cpu for tensorflow): a requirement the
    lock lost would show only when a program imports it, so the venv's metadata is read."""
    import subprocess

    from flows.common.paths import REHEARSAL_DIR

    venv = rehearsal_image.venv_dir()
    done = subprocess.run([str(venv / "bin" / "python"), str(REHEARSAL_DIR / "check_closed.py")],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    listed = subprocess.run([str(venv / "bin" / "python"), "-c",
                             "import importlib.metadata as m; print(m.version('tensorflow-cpu'));"
                             "import importlib.util as u; print(u.find_spec('tensorflow') is not None)"],
                            capture_output=True, text=True, check=True).stdout.split()
    assert listed == ["2.20.0", "True"]


def test_rerun_with_nothing_changed_skips_every_stage(first_run, root):
    again = rl_post_training(profile="rehearsal", overrides={"local.root": str(root)})
    assert set(stage_statuses(again).values()) == {"skipped"}
    assert again.artifacts == first_run.artifacts
    assert all(not s.workloads for s in again.stages)


def test_an_unchanged_rerun_from_the_cli_needs_no_api_server(first_run, root):
    """`tpurl run` finds every stage done from files and reports the last result: no server
    started, none left (flows/console/finished.py)."""
    import subprocess
    import sys

    from flows.common.paths import REPO_ROOT
    from flows.console.finished import finished_result

    profile = load_profile("rehearsal", {"local.root": str(root)})
    finished = finished_result(profile)
    assert finished is not None and finished.artifacts == first_run.artifacts
    assert {s.status for s in finished.stages} == {"skipped"}
    # a tracker hears of every run, a rerun too: only the flow reports
    tracked = load_profile("rehearsal", {"local.root": str(root), "tracking.wandb.project": "p",
                                         "tracking.wandb.mode": "offline"})
    assert finished_result(tracked) is None
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL",
                                                             "TPURL_KEEP_API_S")}
    done = subprocess.run([str(Path(sys.executable).with_name("tpurl")), "run", "rehearsal",
                           "--set", f"local.root={root}"], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "nothing ran and no Prefect API server was started" in done.stdout
    assert "api-server" not in done.stderr
    # the README's sample of what a rehearsal prints has the shape of what this one printed:
    # every line but the live run's own log line and the promotion's (its decision may differ)
    from tests.support.readme import line_shape, text_block

    printed = done.stdout.splitlines()
    for line in text_block("rehearsal-output", "README.md").splitlines():
        if line.strip().startswith(("logs:", "rejected:", "promoted:", "(")):
            continue
        assert any(line_shape(line).fullmatch(out) for out in printed), (line, printed)


# W&B offline, its key a secret reference (a random one: no file of the run may carry it)
WANDB = {"tracking.wandb.project": "grpo-rehearsal", "tracking.wandb.mode": "offline",
         "tracking.wandb.api_key.env": "WB_KEY_FOR_TEST"}
WANDB_KEY = os.urandom(20).hex()
# a dataset processor of the team's: it enters the training's key, as its reward does
PROCESSOR = Path(__file__).parents[1] / "support" / "recipes" / "delegating_processor.py"
# a reward that pays every completion alike (the hack at its simplest: nothing to learn,
# every GRPO group degenerate)
CONSTANT_REWARD = ("def constant_reward(prompts, completions, **kwargs):\n"
                   "    return [1.0] * len(completions)\n")


class TeamRerun(NamedTuple):
    result: PipelineResult
    layout: Layout
    profile: Profile
    promoted_before: PromotedModel | None  # the shipped profile's pointer before the rerun


@pytest.fixture(scope="module")
def constant_rewards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    team = tmp_path_factory.mktemp("team-recipe") / "constant_rewards.py"
    team.write_text(CONSTANT_REWARD)
    return team


def _team_overrides(root: Path, rewards: Path) -> dict[str, str]:
    """What keys the team's training (tracking keys nothing)."""
    return {"local.root": str(root), "recipe.dataset_processor": str(PROCESSOR),
            "recipe.rewards.file": str(rewards), "recipe.rewards.functions": "constant_reward"}


@pytest.fixture(scope="module")
def team_rerun(first_run, root, constant_rewards) -> TeamRerun:
    """The rerun with a team's dataset processor and constant reward, judged against the
    base; with its Layout, profile and the pointer before it."""
    from flows.core.promotion_store import read_promoted
    from flows.core.storage import LocalStorage

    overrides = {**_team_overrides(root, constant_rewards), "promotion.against": "base"}
    profile = load_profile("rehearsal", overrides)
    before = read_promoted(LocalStorage(), profile)
    return TeamRerun(rl_post_training(profile="rehearsal", overrides=overrides),
                     Layout(profile), profile, before)


def test_a_changed_recipe_reruns_train_export_and_evaluate_only(first_run, team_rerun):
    changed = team_rerun.result
    assert stage_statuses(changed) == {"image": "skipped", "infra": "skipped", "convert": "skipped",
                                       "train": "ran", "export": "ran", "evaluate": "ran"}
    assert changed.artifacts["maxtext_checkpoint"] == first_run.artifacts["maxtext_checkpoint"]
    assert changed.artifacts["trained_checkpoint"] != first_run.artifacts["trained_checkpoint"]


def test_the_teams_dataset_processor_is_the_one_maxtext_used(team_rerun):
    """MaxText's prepare_datasets logs the file whose process_data it loaded: the recipe's,
    where the rehearsal reads it."""
    changed, layout = team_rerun.result, team_rerun.layout
    assert changed.recipe["files"]["dataset_processor"]["path"] == str(PROCESSOR)
    log = _path(layout.log(layout.train_run_dir, "train-grpo")).read_text()
    assert f"using custom process_data from {PROCESSOR}" in log


def test_a_constant_reward_fires_the_sentinel_and_holds_the_promotion(team_rerun):
    """The team's reward pays every completion alike, through the real train_rl:
    group_collapse fires at the second step, the run passes its rule (trained and base score
    alike, against the base) and the promotion is held, the pointer untouched; `tpurl
    status`'s lines name it. Image, infra and convert are the first run's, skipped."""
    from flows.core.promotion_store import read_promoted
    from flows.core.storage import LocalStorage
    from flows.health.holds import held_runs
    from flows.runpage.promotion import promoted_lines

    result, profile = team_rerun.result, team_rerun.profile
    assert [(f["detector"], f["policy"]) for f in result.health] == [("group_collapse",
                                                                     "hold")], result.health
    assert result.health[0]["step"] == 1 and result.health[0]["figures"]["fraction"] == 1.0
    decision = result.evaluation["decision"]
    assert decision["held"] and not decision["promoted"], decision
    assert read_promoted(LocalStorage(), profile) == team_rerun.promoted_before
    (held,) = held_runs(LocalStorage(), profile)
    assert held.candidate.model_uri == result.artifacts["hf_export"]
    assert f"held promotion: run {held.run}" in "\n".join(promoted_lines(LocalStorage(),
                                                                        profile))


# tunix 0.1.8 rl_cluster.py logs each step's prompts: which rows a step trained on
PROMPTS = re.compile(r"Rollout string metric prompts: (.*)")
TRAIN_STEP = re.compile(r"Train step (\d+) training loss")


@pytest.fixture(scope="module")
def continued_run(team_rerun, root,
                  constant_rewards) -> tuple[PipelineResult, Layout, StageFailed, str]:
    """The team's training (2 batches) asked for 3, without evaluation, tracked to W&B
    offline. The rehearsal leaves the schedule to MaxText, which spans it over the run's
    length, so the first attempt is refused before anything runs; the run with the setting
    its fix names continues the 2-step run. With the refusal and the 2-step run's log (the
    continued run's replaces it)."""
    layout = team_rerun.layout
    earlier_log = _path(layout.log(layout.train_run_dir, "train-grpo")).read_text()
    longer = {**_team_overrides(root, constant_rewards), **NO_EVAL, **WANDB,
              "train.args.num_batches": "3"}
    outside = {n: os.environ.pop(n) for n in ("WANDB_API_KEY", "WANDB_PROJECT", "WANDB_MODE",
                                               "WANDB_DIR") if n in os.environ}
    os.environ["WB_KEY_FOR_TEST"] = WANDB_KEY
    try:
        with pytest.raises(StageFailed) as caught:
            rl_post_training(profile="rehearsal", overrides=longer)
        name, value = re.findall(r"train\.args\.([\w.]+): (\d+)",
                                 caught.value.diagnosis.fix)[0]
        fixed = {**longer, f"train.args.{name}": value}
        return (rl_post_training(profile="rehearsal", overrides=fixed),
                Layout(load_profile("rehearsal", fixed)), caught.value, earlier_log)
    finally:
        os.environ.pop("WB_KEY_FOR_TEST", None)
        os.environ.update(outside)


def test_a_longer_run_is_refused_naming_the_schedule_that_continues_it(team_rerun,
                                                                      continued_run):
    layout = team_rerun.layout
    _, _, refusal, _ = continued_run
    assert refusal.stage == "train" and refusal.diagnosis.code == "config/schedule-follows-length"
    assert layout.run_name in refusal.diagnosis.summary
    assert "train.args.learning_rate_schedule_steps: 2 to continue run" in refusal.diagnosis.fix


def test_the_continued_run_trains_one_step_on_the_next_batch(team_rerun, continued_run):
    """2 steps, then 3: the same run directory, one step trained (its log and checkpoints),
    on a row neither earlier step trained on (tunix fast-forwarded its iterator past the two
    batches the restored step took), and the lineage names the run and step it continued."""
    layout = team_rerun.layout
    result, longer, _, earlier_log = continued_run
    assert stage_statuses(result) == {"image": "skipped", "infra": "skipped",
                                      "convert": "skipped", "train": "ran", "export": "ran"}
    assert longer.train_run_dir == layout.train_run_dir
    assert result.artifacts["trained_checkpoint"] == longer.actor_params(3)
    saved = sorted(p.name for p in _path(layout.actor_checkpoints).iterdir())
    assert saved == ["2", "3"]
    log = _path(longer.log(longer.train_run_dir, "train-grpo")).read_text()
    assert TRAIN_STEP.findall(earlier_log) == ["1", "2"] and TRAIN_STEP.findall(log) == ["3"]
    assert "Fast forwarded 2 micro-batches" in log
    seen, new = PROMPTS.findall(earlier_log), PROMPTS.findall(log)
    assert len(seen) == 2 and len(new) == 1 and new[0] not in seen
    record = json.loads(_path(longer.record(longer.train_run_dir)).read_text())
    assert record["details"]["continued"] == {"run": layout.run_name, "from_step": 2,
                                              "steps_trained": 1}


def test_the_real_training_logs_to_the_profiles_wandb_project_offline(continued_run):
    """The continued run's training, tracked, lands under the profile's project, not
    tunix's default "tunix":
    the declared patch maxtext-wandb-project (images/post-training/patches.yaml) passes
    WANDB_PROJECT to MetricsLoggerOptions (tunix/sft/metrics_logger.py:189-197 at c4ec573d
    builds the WandbBackend from its project_name)."""
    _, layout, _, _ = continued_run
    run_dir = _path(layout.train_run_dir)
    [run_file] = run_dir.glob("wandb/offline-run-*/run-*.wandb")
    run = run_record(run_file)
    assert (run.project, run.run_group) == ("grpo-rehearsal", layout.run_name)
    rows = [row for row in history(run_file) if any("/" in k for k in row)]
    steps = {int(float(row["_step"])) for row in rows if "_step" in row}
    assert rows and steps, history(run_file)
    logged = {k for row in rows for k in row if not k.startswith("_")}
    assert any("reward" in k for k in logged) and any("loss" in k for k in logged), logged
    written = [p for p in run_dir.rglob("*") if p.is_file()]
    assert not [p for p in written if WANDB_KEY.encode() in p.read_bytes()]


def test_a_changed_base_model_reconverts_and_a_train_error_then_fails_at_once(first_run, root):
    """Two proofs, one run (a second MaxText train and export on CPU cost minutes and prove
    nothing more: that a changed base reruns every stage after convert is
    tests/stages/test_execute.py's, in milliseconds). Another tiny model (its seed) makes
    infra write new sources and convert a new MaxText checkpoint from them; the train that
    follows is given a name MaxText knows with a value only its own config model refuses (an
    unknown name is refused at validation, before anything runs:
    tests/config/test_maxtext_keys.py), and fails at once with its cause, keeping its log."""
    overrides = {"local.root": str(root), "local.tiny_model_seed": "1",
                 "train.args.warmup_steps_fraction": "not-a-number", **NO_EVAL}
    with pytest.raises(StageFailed) as caught:
        rl_post_training(profile="rehearsal", overrides=overrides)
    failure = caught.value
    assert failure.stage == "train" and failure.diagnosis.category == "user-error"
    assert "warmup_steps_fraction" in failure.diagnosis.detail
    assert failure.log_uri and _path(failure.log_uri).is_file()

    layout = Layout(load_profile("rehearsal", overrides))
    converted = _path(layout.converted_checkpoint)
    assert converted != _path(first_run.artifacts["maxtext_checkpoint"])
    assert any(converted.iterdir()), "convert wrote the new base's checkpoint"
    assert _path(layout.record(layout.convert_dir)).is_file()
    assert (_path(layout.tiny_model_dir) / "config.json").is_file()
    first_sources = Layout(load_profile("rehearsal", {"local.root": str(root)})).sources_dir
    assert layout.sources_dir != first_sources


def test_a_broken_reward_function_fails_train_at_once_naming_it(first_run, root, tmp_path):
    """A recipe whose function returns one score too few, through the real train_rl and
    the guard: Tunix would sum what it got; the guard stops the program on its marked line,
    and the train stage makes that the user's error naming the function. The traceback
    through JAX and Tunix after the line is longer than the tail a diagnosis keeps, so this
    also proves the line is read from the whole log. Image, infra and convert are the first
    run's, skipped; the train fails at its first rollout."""
    team = tmp_path / "team_rewards.py"
    team.write_text("def short_by_one(prompts, completions, **kwargs):\n"
                    "    return [0.5] * (len(completions) - 1)\n")
    overrides = {"local.root": str(root), "recipe.rewards.file": str(team),
                 "recipe.rewards.functions": "short_by_one", **NO_EVAL}
    with pytest.raises(StageFailed) as caught:
        rl_post_training(profile="rehearsal", overrides=overrides)
    diagnosis = caught.value.diagnosis
    assert caught.value.stage == "train" and diagnosis.category == "user-error"
    assert diagnosis.code == "recipe/reward" and not diagnosis.retryable
    said = re.fullmatch(r"the recipe's reward function short_by_one: returned (\d+) scores "
                        r"for (\d+) completions", diagnosis.summary)
    assert said and int(said[1]) == int(said[2]) - 1, diagnosis.summary
    assert caught.value.log_uri and _path(caught.value.log_uri).is_file()


DECISIONS = ("tpurl.model.promoted", "tpurl.model.rejected")


def test_events_artifacts_and_no_secret_anywhere(first_run, root):
    import time

    from prefect.client.orchestration import get_client

    evaluation = first_run.evaluation
    assert evaluation is not None
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey
    from prefect.events.filters import EventFilter, EventNameFilter

    def read_all(client) -> list:
        page = client.read_events(filter=EventFilter(event=EventNameFilter(prefix=["tpurl."])),
                                  limit=50)
        found = list(page.events)
        while page.next_page:
            page = client.read_events_page(page.next_page)
            found += page.events
        return found

    with get_client(sync_client=True) as client:
        deadline = time.monotonic() + 60  # events reach the API asynchronously
        while True:
            events = read_all(client)
            exported = [e.payload["hf_export"] for e in events
                        if e.event == "tpurl.model.exported"]
            # the first decision of the rehearsal is the first run's (the module's fixture
            # runs before its tests; the later reruns judge their own models too)
            decisions = sorted((e for e in events if e.event in DECISIONS
                                and e.resource.get("tpurl.profile") == "rehearsal"),
                               key=lambda e: e.occurred)
            if (first_run.artifacts["hf_export"] in exported and decisions) \
                    or time.monotonic() > deadline:
                break
            time.sleep(2)
        names = [e.event for e in events]
        for stage in ("image", "infra", "convert", "train", "export", "evaluate"):
            assert any(e.event == "tpurl.stage.started" and
                       e.resource.get("tpurl.stage") == stage for e in events), stage
        assert first_run.artifacts["hf_export"] in exported, names
        assert decisions, names
        assert evaluation["decision"]["promoted"] == (
            decisions[0].event == "tpurl.model.promoted"), [e.event for e in decisions]
        artifacts = client.read_artifacts(artifact_filter=ArtifactFilter(
            key=ArtifactFilterKey(like_="tpurl-rehearsal-")))
        keys = {a.key for a in artifacts}
        assert {"tpurl-rehearsal-stages", "tpurl-rehearsal-local-runs-hf-export",
                "tpurl-rehearsal-metrics", "tpurl-rehearsal-evaluation",
                "tpurl-rehearsal-recipe"} <= keys, keys
        texts = [first_run.model_dump_json(), str(names),
                 *(e.model_dump_json() for e in events),
                 *(str(a.data) for a in artifacts)]
    texts += [p.read_text(errors="replace") for p in root.rglob("*.log")]
    texts += [p.read_text() for p in root.rglob("tpurl-lineage.json")]
    assert not [t for t in texts if CANARY in t]
