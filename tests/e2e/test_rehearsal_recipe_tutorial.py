"""The recipe tutorial (docs/tutorials/your-recipe.md) as a reader runs it: its commands as
written, in order, in a folder of the reader's with the repository's ``.venv``, against the
output root where the reader's rehearsal ran before (TPURL_LOCAL__ROOT: the session's, whose
shipped rehearsal tests/e2e/test_rehearsal_e2e.py ran first). That the recipe leaves the
conversion alone, as the page says, is both runs': conversion skipped, training again.

Three runs of the real MaxText programs on CPU: the reader's reward (train, export and
evaluate run on the rehearsal's conversion), one changed line (they run again; conversion
is skipped), and the same command again (everything skipped). The runs leave out nothing
the page shows, so the tutorial's claims are the assertions: the function's curve by its
name, the content key, the plan's file locations, and the profile block that keeps the
recipe.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from flows.common.paths import PROFILES_DIR, REPO_ROOT
from flows.config import load_profile
from flows.core.layout import RESULTS_DIR
from flows.run.result import PipelineResult
from tests.support.readme import blocks, line_shape, python_block, text_block, yaml_block

PAGE = "tutorials/your-recipe.md"
FUNCTION = "length_penalised_match"

pytestmark = pytest.mark.rehearsal

Run = Callable[[str], subprocess.CompletedProcess[str]]


@pytest.fixture(scope="module")
def reader_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The reader's checkout as far as the page's commands see it: ``.venv`` at the root."""
    where = tmp_path_factory.mktemp("recipe-reader")
    (where / ".venv").symlink_to(REPO_ROOT / ".venv")
    return where


@pytest.fixture(scope="module")
def run(reader_dir: Path, rehearsal_root: Path, prefect_api: None) -> Run:
    """Runs one marked bash block of the page as written, in the reader's folder; the output
    root is the session's rehearsal root (TPURL_LOCAL__ROOT, as a reader's environment
    may set any field) and the Prefect API the session's."""
    from prefect.settings import PREFECT_API_URL

    env = {**os.environ, "TPURL_LOCAL__ROOT": str(rehearsal_root),
           "PREFECT_API_URL": str(PREFECT_API_URL.value())}
    commands = blocks(PAGE)

    def one(name: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", "-euo", "pipefail", "-c", commands[name]],
                              cwd=reader_dir, env=env, capture_output=True, text=True,
                              timeout=1500)

    return one


def _latest(root: Path) -> dict:
    return json.loads((root / RESULTS_DIR / "rehearsal" / "latest.json").read_text())


def _statuses(result: dict) -> dict[str, str]:
    return {s["stage"]: s["status"] for s in result["stages"]}


def _shapes_printed(block: str, printed: str) -> None:
    lines = printed.splitlines()
    for line in text_block(block, PAGE).splitlines():
        assert any(line_shape(line).fullmatch(out) for out in lines), (line, printed[-3000:])


def test_every_command_of_the_page_is_marked_for_this_test():
    assert set(blocks(PAGE)) == {"recipe-folder", "recipe-validate", "recipe-misspelt",
                                 "recipe-run", "recipe-change", "recipe-plan"}


def test_the_written_reward_validates(run: Run, reader_dir: Path):
    assert run("recipe-folder").returncode == 0
    (reader_dir / "my-recipe" / "rewards.py").write_text(python_block("recipe-rewards", PAGE))
    done = run("recipe-validate")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == text_block("recipe-valid", PAGE).strip()


def test_a_misspelt_function_is_refused_naming_the_one_the_file_defines(run: Run):
    done = run("recipe-misspelt")
    assert done.returncode == 2, done.stdout + done.stderr
    said = done.stdout + done.stderr
    assert "recipe.rewards.functions" in said and FUNCTION in said


@pytest.fixture(scope="module")
def first(run: Run, rehearsal_root: Path,
          shipped_rehearsal: PipelineResult) -> tuple[subprocess.CompletedProcess[str], dict]:
    """The page's first run, after the rehearsal the reader ran in the same root."""
    done = run("recipe-run")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done, _latest(rehearsal_root)


def test_the_run_trains_with_the_readers_reward_and_prints_its_curve(first, shipped_rehearsal):
    done, result = first
    statuses = _statuses(result)
    assert all(statuses[s] == "ran" for s in ("train", "export", "evaluate")), statuses
    # "The conversion is the one the rehearsal made before (the recipe is not part of its key)"
    assert statuses["infra"] == statuses["convert"] == "skipped", statuses
    assert result["artifacts"]["maxtext_checkpoint"] == \
        shipped_rehearsal.artifacts["maxtext_checkpoint"]
    _shapes_printed("recipe-curve", done.stdout)
    per_step = [s[f"rewards/train/{FUNCTION}"] for s in result["metrics"]["steps"]
                if f"rewards/train/{FUNCTION}" in s]
    assert len(per_step) == 2 and len(set(per_step)) == 2  # a curve, not a constant
    assert all(value < 0 for value in per_step)  # the penalty alone: no right answer


@pytest.fixture(scope="module")
def changed(first, run: Run, rehearsal_root: Path) -> tuple[subprocess.CompletedProcess[str], dict]:
    done = run("recipe-change")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done, _latest(rehearsal_root)


def test_one_changed_line_trains_again_and_converts_nothing(first, changed):
    done, result = changed
    statuses = _statuses(result)
    assert statuses["convert"] == "skipped"
    assert all(statuses[s] == "ran" for s in ("train", "export", "evaluate")), statuses
    assert result["artifacts"]["trained_checkpoint"] != first[1]["artifacts"]["trained_checkpoint"]
    _shapes_printed("recipe-rerun", done.stdout)


def test_the_same_command_again_skips_every_stage(changed, run: Run, rehearsal_root: Path):
    done = run("recipe-run")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    stage_lines = [line.split() for line in done.stdout.splitlines()
                   if line.startswith("  ") and len(line.split()) == 4 and line.split()[3] == "s"]
    assert {words[1] for words in stage_lines} == {"skipped"}, done.stdout
    assert len(stage_lines) == 6, done.stdout
    assert _latest(rehearsal_root)["artifacts"] == changed[1]["artifacts"]


def test_the_gke_plan_says_where_the_file_goes(run: Run):
    done = run("recipe-plan")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "REWARD_GUARD_FILE=/tpurl/programs/recipe_rewards.py" in done.stdout
    assert f"reward_functions={FUNCTION}" in done.stdout
    assert "reward_functions_path=/tpurl/programs/reward_guard.py" in done.stdout


def test_the_profile_block_keeps_the_recipe_beside_the_profile(reader_dir: Path):
    """A profile of the reader's, in their folder: the shipped rehearsal's fields with the
    page's recipe block; its relative path is read beside the profile."""
    data = yaml.safe_load((PROFILES_DIR / "rehearsal.yaml").read_text())
    data.update(yaml.safe_load(yaml_block("recipe-profile", PAGE)))
    data.pop("name")  # the reader's file is named by its own stem
    (reader_dir / "my-rehearsal.yaml").write_text(yaml.safe_dump(data))
    (reader_dir / "my-recipe").mkdir(exist_ok=True)
    (reader_dir / "my-recipe" / "rewards.py").write_text(python_block("recipe-rewards", PAGE))
    profile = load_profile(str(reader_dir / "my-rehearsal.yaml"))
    assert profile.recipe.rewards is not None
    assert profile.recipe.rewards.functions == (FUNCTION,)
    assert Path(profile.recipe.rewards.file) == (reader_dir / "my-recipe" / "rewards.py").resolve()
