"""Throughput from the programs' own metrics (flows/core/throughput.py) and the plan's
estimate that learns from it (flows/operations/learned_estimate.py), pure: a real event file
of the CPU rehearsal (MaxText 0.2.4, Tunix 0.1.8), and summaries laid out as
flows/runpage/metrics.py ``summarize_run`` writes them."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import pytest

from flows.core.throughput import (
    COMPLETION_LENGTH,
    CPU_LABEL,
    PERF_ROLLOUT,
    PERF_STEP,
    PERF_SWITCH,
    PERF_TRAINING,
    PERF_WEIGHT_SYNC,
    Throughput,
    measure,
    summary_line,
)
from flows.operations.learned_estimate import estimate_lines, train_estimate
from flows.run.result import PipelineResult, StageReport, throughput_status_line
from flows.runpage.metrics import decode_timed_events, step_durations
from tests.support.tfevents import pb_field, pb_varint, tf_record

GOLDEN = Path(__file__).parents[1] / "golden" / "tensorboard"


def _timed_event(step: int, wall: float, tag: str, value: float) -> bytes:
    scalar = pb_field(1, 2, tag.encode()) + pb_field(2, 5, struct.pack("<f", value))
    return tf_record(pb_field(1, 1, struct.pack("<d", wall)) + pb_field(2, 0, pb_varint(step))
                     + pb_field(5, 2, pb_field(1, 2, scalar)))


def test_the_rehearsals_own_event_file_gives_its_step_time() -> None:
    """The event file a rehearsal train_rl wrote (two GRPO steps of Qwen3-30B-A3B's small
    stand-in on CPU): one step measured between its two completion-length records."""
    data = gzip.decompress((GOLDEN / "rehearsal-qwen3-30b-a3b-train.tfevents.gz").read_bytes())
    scalars, bad, walls = decode_timed_events(data)
    assert not bad and sorted(walls) == [0, 1]
    durations = step_durations(walls)
    assert list(durations) == [1] and 1.0 < durations[1] < 600.0
    lengths = [v for tag, _step, v in scalars if tag == COMPLETION_LENGTH]
    metrics = {"steps": [{"step": s, COMPLETION_LENGTH: v} for s, v in enumerate(lengths)],
               "step_seconds": [[1, durations[1]]]}
    found = measure(metrics, completions_per_step=2, chips=1, usd_per_chip_hour=0.0,
                    hardware=CPU_LABEL, cpu=True)
    assert found is not None and found.cpu and found.usd_per_million_tokens is None
    assert found.tokens_per_s_per_chip == pytest.approx(2 * lengths[0] / durations[1], rel=1e-3)
    line = summary_line(found)
    assert line.startswith(CPU_LABEL) and f"set train.args.{PERF_SWITCH}: true" in line
    assert "MFU not reported: MaxText 0.2.4's train_rl" in line


def test_steps_are_timed_within_one_file_only_and_other_tags_keep_no_clock() -> None:
    """A resumed run writes a new file: the start-up between is no step. JAX's own tags,
    written at step 0 whenever it compiles, do not move step 0's clock."""
    first = b"".join([_timed_event(0, 100.0, COMPLETION_LENGTH, 8),
                      _timed_event(0, 900.0, "jax/core/compile/backend_compile_duration", 1),
                      _timed_event(1, 130.0, COMPLETION_LENGTH, 8)])
    second = b"".join([_timed_event(2, 1000.0, COMPLETION_LENGTH, 8),
                       _timed_event(3, 1020.0, COMPLETION_LENGTH, 8)])
    assert step_durations(decode_timed_events(first)[2]) == {1: 30.0}
    assert step_durations(decode_timed_events(second)[2]) == {3: 20.0}
    assert step_durations({0: 10.0, 2: 20.0}) == {}  # not consecutive: not one step


def _perf_steps(n: int) -> list[dict[str, float | int]]:
    return [{"step": s, COMPLETION_LENGTH: 500.0, PERF_STEP: 300.0 if s == 0 else 60.0,
             PERF_ROLLOUT: 40.0, PERF_TRAINING: 15.0, PERF_WEIGHT_SYNC: 5.0}
            for s in range(n)]


def test_tunix_perf_metrics_give_the_split_and_the_first_step_is_left_out() -> None:
    found = measure({"steps": _perf_steps(4)}, completions_per_step=64, chips=8,
                    usd_per_chip_hour=2.70, hardware="v6e 2x4, 8 chips")
    assert found is not None
    assert found.step_s == 60.0 and found.steps_measured == 4  # the compiling step left out
    assert (found.rollout_s, found.training_s, found.weight_sync_s) == (40.0, 15.0, 5.0)
    # 500 tokens x 64 completions per 60 s step over 8 chips
    assert found.tokens_per_s_per_chip == pytest.approx(500 * 64 / 60 / 8, abs=1e-3)
    # 8 chips x $2.70 for one minute buys 32,000 tokens
    assert found.usd_per_million_tokens == pytest.approx(8 * 2.70 / 60 / 32000 * 1e6, abs=1e-3)
    assert "rollout 40.0 s, training 15.0 s, weight sync 5.0 s" in summary_line(found)


@pytest.mark.parametrize("steps", [0, 1])
def test_no_figure_without_two_steps_of_one_file(steps: int) -> None:
    metrics = {"steps": [{"step": s, COMPLETION_LENGTH: 5.0} for s in range(steps)],
               "step_seconds": []}
    assert measure(metrics, 2, 8, 2.7, "v6e") is None


def test_two_measured_steps_both_count() -> None:
    """Three or more: the first is left out (it compiled); two: both count, the median."""
    metrics = {"steps": [], "step_seconds": [[1, 10.0], [2, 20.0]]}
    found = measure(metrics, 2, 8, 2.7, "v6e")
    assert found is not None and found.step_s == 15.0 and found.tokens_per_s_per_chip is None
    assert "tokens/s per chip not known" in summary_line(found)


# --- the plan's estimate: measured where the profile ran before -------------------------

def _result(step_s: float, chips: int = 8, completions: int = 64, train_chip_h: float = 4.0,
            finished: str = "2026-12-06T10:00:00+00:00", steps: int = 10,
            status: str = "ran") -> PipelineResult:
    t = Throughput(hardware="v6e 2x4, 8 chips", chips=chips, steps_measured=steps,
                   step_s=step_s, step_source="x", completions_per_step=completions)
    stage = StageReport(stage="train", status=status, duration_s=1.0, chip_hours=train_chip_h,
                        uris={})
    return PipelineResult(profile="p", backend="gke", artifacts={}, stages=[stage],
                          chip_hours=train_chip_h, metrics={"steps": [
                              {"step": s, COMPLETION_LENGTH: 9.0} for s in range(steps)]},
                          wall_s=1.0, started_at=finished, finished_at=finished,
                          throughput=t.model_dump())


def test_the_plan_learns_the_steps_and_start_up_from_the_last_runs() -> None:
    # 4 chip-hours on 8 chips: 0.5 h held; 10 steps of 90 s are 0.25 h; start-up 0.25 h
    runs = [_result(90.0), _result(90.0), _result(200.0, chips=32), _result(90.0, status="skipped")]
    est = train_estimate(4.0, 50, 8, 2.70, 64, runs)
    assert est.measured and est.runs == 2 and est.step_s == 90.0
    assert est.startup_h == pytest.approx(0.25)
    assert est.hours == pytest.approx(0.25 + 50 * 90 / 3600)
    assert est.usd == pytest.approx(round(est.hours * 8 * 2.70, 2))
    line = estimate_lines(est, 50, 4.0)[0]
    assert line.startswith("training estimate: MEASURED from the last 2 run(s)")
    assert "set gke.estimated_hours.train" in line


def test_the_plan_says_guess_where_no_run_matches() -> None:
    """Another slice, another step size, a CPU figure: none describes this plan."""
    cpu = _result(30.0)
    cpu.throughput = {**(cpu.throughput or {}), "cpu": True}
    runs = [_result(90.0, chips=32), _result(90.0, completions=8), cpu]
    est = train_estimate(4.0, 50, 8, 2.70, 64, runs)
    assert not est.measured and est.hours == 4.0 and est.usd == round(4.0 * 8 * 2.70, 2)
    assert estimate_lines(est, 50, 4.0)[0].startswith(
        "training estimate: GUESS, the profile's gke.estimated_hours.train = 4 h ($86.40)")


def test_status_names_the_newest_measured_run() -> None:
    older, newer = _result(90.0), _result(45.0, finished="2026-12-06T12:00:00+00:00")
    newer.throughput = None
    assert "step 90.0 s" in throughput_status_line([newer, older])
    assert "no run of this profile has measured it yet" in throughput_status_line([newer])


def test_the_run_page_shows_the_figure_and_nothing_without_one() -> None:
    from flows.runpage.artifacts import throughput_markdown

    measured = _result(90.0)
    assert throughput_markdown(measured).startswith("**Throughput** · v6e 2x4, 8 chips\\:")
    measured.throughput = None
    assert throughput_markdown(measured) == ""


def test_the_plan_says_what_its_hours_imply_per_chip_and_per_million_tokens() -> None:
    from flows.operations.learned_estimate import planned_rate_line

    # the tutorial's guess: 4 h for 50 steps of 8 prompts x 4 generations, 256 tokens each
    line = planned_rate_line(4.0, 50, 32, 256, 32, 2.70)
    assert "at most 1 generated tokens/s per chip" in line
    assert f"at least ${4 * 32 * 2.70 / (50 * 32 * 256) * 1e6:,.2f} per million" in line
    assert planned_rate_line(4.0, None, 32, 256, 32, 2.70) == ""
    assert planned_rate_line(4.0, 50, 32, 0, 32, 2.70) == ""


def test_a_gke_result_is_per_chip_of_its_slice_at_its_price() -> None:
    """The result's figure on the tutorial's slice: 32 chips of v6e 4x8, its 8 prompts x 4
    generations per step, the run's price per chip-hour."""
    from flows.run.result import run_throughput
    from tests.support.profiles import tutorial_profile

    metrics = {"steps": [{"step": s, COMPLETION_LENGTH: 100.0} for s in range(3)],
               "step_seconds": [[1, 64.0], [2, 64.0]]}
    found = run_throughput(tutorial_profile(), metrics, 2.70)
    assert found is not None and not found["cpu"]
    assert found["hardware"] == "v6e 4x8, 32 chips" and found["completions_per_step"] == 32
    assert found["tokens_per_s_per_chip"] == pytest.approx(100 * 32 / 64 / 32, abs=1e-3)
    assert run_throughput(tutorial_profile(), {"steps": []}, 2.70) is None


def test_status_reads_the_newest_measured_result_from_the_profiles_root(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`tpurl status` on a rehearsal profile: its results as the flow writes them (real
    files), the newest measured one named, a damaged file and latest.json skipped."""
    from flows.config import load_profile
    from flows.core.storage import LocalStorage
    from flows.operations.status import status_command
    from flows.run.result import persist_result

    profile = load_profile("rehearsal", {"local.root": str(tmp_path)}, environ={})
    storage = LocalStorage()
    measured = _result(30.0, chips=1, finished="2026-12-06T10:00:00+00:00")
    measured.profile = profile.name
    measured.throughput = {**(measured.throughput or {}), "cpu": True}
    newer = _result(30.0, finished="2026-12-06T11:00:00+00:00")
    newer.profile, newer.throughput = profile.name, None
    persist_result(storage, profile, "older", measured)
    persist_result(storage, profile, "newer", newer)
    (tmp_path / "tpurl-results" / profile.name / "damaged.json").write_text("{not json")
    assert status_command(profile) == 0
    out = capsys.readouterr().out
    assert "last measured run (2026-12-06T10:00 UTC): CPU rehearsal: one CPU process" in out


def test_a_damaged_figure_from_the_bucket_is_no_line_and_never_raises() -> None:
    from flows.core.throughput import line_of
    from flows.runpage.artifacts import throughput_markdown

    damaged = _result(90.0)
    damaged.throughput = {"hardware": "v6e", "step_s": "fast"}
    assert line_of(damaged.throughput) is None and line_of(None) is None
    assert throughput_markdown(damaged) == ""
    assert "no run of this profile has measured it yet" in throughput_status_line([damaged])


class _SilentBucket:
    """A bucket that never answers, as an unreachable one looks through the cloud client's
    minutes of retries (google-api-core retries each call up to 120 s by default)."""

    def __init__(self) -> None:
        import threading
        self.release = threading.Event()

    def files_under(self, uri: str) -> list[str]:
        self.release.wait(60)
        return []


def test_an_unanswering_bucket_is_given_up_and_the_plan_says_so() -> None:
    from flows.config import load_profile
    from flows.run.result import recent_results_within
    from tests.support.profiles import TUTORIAL, TUTORIAL_REQUIRED

    profile = load_profile(TUTORIAL, TUTORIAL_REQUIRED, environ={})
    bucket = _SilentBucket()
    try:
        assert recent_results_within(bucket, profile, seconds=0.2) is None  # type: ignore[arg-type]
    finally:
        bucket.release.set()
    assert recent_results_within(bucket, profile, seconds=5) == []  # type: ignore[arg-type]
