"""What of a program's output reaches the run page's Logs tab, on output captured from a real
rehearsal run (MaxText 0.2.4 train_rl and to_maxtext on CPU, uv installing the venv; paths
replaced by /REPO): the warnings, the steps and the end are shown, the configuration dump
and the installer's listing are summarised in one line that names the kept log."""

from __future__ import annotations

import gzip
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from flows.core.program_log import ProgramLines
from flows.core.programs import STEP_REGEX

CAPTURED = Path(__file__).parents[1] / "golden" / "program_logs"
LOG = "file:///REPO/.tpurl/rehearsal/x/tpurl-logs/train-grpo.log"


def captured(name: str) -> list[str]:
    return gzip.decompress((CAPTURED / f"{name}.log.gz").read_bytes()).decode().splitlines()


def shown_of(name: str, lines: list[str], regex: str | None = None) -> tuple[list[str], ProgramLines]:
    program = ProgramLines(name, regex)
    return [line for line in lines if program.keep(line)], program


def test_train_rl_shows_its_warnings_steps_and_end_and_summarises_the_config_dump():
    lines = captured("train-grpo")
    shown, program = shown_of("train-grpo", lines, STEP_REGEX)
    dump = [line for line in lines if "] Config param " in line]
    assert len(dump) == 837 and program.counts["config"] == 837
    assert not any("Config param" in line for line in shown)
    assert len(shown) < 0.05 * len(lines)
    # what a user needs: the steps (the progress card's source), warnings, the end
    assert sum("peft_trainer.py:488] Train step" in line for line in shown) == 2
    assert any("RL Training Completed Successfully!" in line for line in shown)
    assert any("Skipping non-TPU device: cpu" in line for line in shown)
    assert any("UserWarning: Pydantic serializer warnings" in line for line in shown)
    assert any("PydanticSerializationUnexpectedValue" in line for line in shown)  # continued
    summary = program.summary(LOG)
    assert program.ending(LOG) == [summary]
    assert summary == (f"train-grpo: {len(lines) - len(shown):,} of {len(lines):,} output lines "
                       f"not shown here (837 configuration dump (`Config param …`), "
                       f"{program.counts['info']:,} informational); the full output is in {LOG}")


def test_the_installer_listing_is_one_line():
    lines = captured("install-rehearsal")
    shown, program = shown_of("install-rehearsal", lines)
    assert shown == [] and program.counts["installer"] > 300
    assert "package installer listing" in (program.summary("file:///x.log") or "")


def test_a_progress_bar_shows_its_last_frame_only():
    lines = captured("convert-hf-to-maxtext")
    shown, program = shown_of("convert", lines)
    bars = [line for line in shown if "%|" in line]
    assert bars and all("100%|" in line for line in bars)
    assert program.counts["progress-bar"] >= 10


def test_a_traceback_is_shown_whole_and_a_quiet_program_needs_no_summary():
    failing = ["I1203 16:06:14.8 1 pyconfig.py:584] Config param a: 1",
               "Traceback (most recent call last):",
               '  File "/x/train_rl.py", line 9, in <module>',
               "    main()",
               "",
               "During handling of the above exception, another exception occurred:",
               '  File "/x/y.py", line 1, in f',
               "ValueError: the dataset has no column 'question'",
               "I1203 16:06:15.0 1 train_rl.py:1] done"]
    shown, program = shown_of("train-grpo", failing)
    assert shown == failing[1:-1]
    assert program.counts == {"config": 1, "info": 1}
    # two hidden lines are shown at the end as they were, not summarised
    assert program.ending(LOG) == [f"[train-grpo] {failing[0]}", f"[train-grpo] {failing[-1]}"]
    assert ProgramLines("quiet").summary(LOG) is None and ProgramLines("quiet").ending(LOG) == []


def test_a_program_of_one_json_line_shows_it():
    line = '{"out": "/REPO/.tpurl/rehearsal/sources/x/data.parquet", "rows": 64, "seed": 0}'
    program = ProgramLines("make-dataset")
    assert not program.keep(line)
    assert program.ending(LOG) == [f"[make-dataset] {line}"]


@given(st.lists(st.text(max_size=80), max_size=60))
def test_every_line_is_shown_or_counted(lines: list[str]):
    shown, program = shown_of("any", lines, STEP_REGEX)
    assert len(shown) + sum(program.counts.values()) == program.total == len(lines)
