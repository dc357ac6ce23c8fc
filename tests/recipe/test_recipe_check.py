"""The recipe check (flows/core/recipe_check.py) against real files, through the real probe
(images/rehearsal/check_recipe.py) in a child process: one test per kind of problem, each
asserting the field, the code and that the message names the file and the line.

The standard-library cases run the probe under this interpreter, importing (as under the
rehearsal venv) and reading (``--static``, the fallback without it) alike. The case that needs
MaxText's import runs under the rehearsal venv when it is built; when it is not, the same test
checks the static path the profile then takes, and says so in its warning.

Every test here starts child processes (a fraction of a second each, the timeout case two
seconds), so the module sits in the services tier, beside the other tiers' waiting.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flows.cli import main
from flows.common.issues import Issue
from flows.common.paths import REPO_ROOT
from flows.config import Profile, ProfileError, load_profile
from flows.core.recipe_check import (
    IMAGE_MODULES,
    ProbeRun,
    RecipeCheck,
    check_recipe,
    run_probe,
)

pytestmark = pytest.mark.services  # a child process per check

HERE = Path(sys.executable)
REHEARSAL_PYTHON = REPO_ROOT / ".venvs" / "rehearsal" / "bin" / "python"
GOOD_REWARD = '''\
"""A reward as MaxText calls it."""
import re


def exact_match(prompts, completions, tmvp_config=None, **kwargs):
    answers = kwargs.get("answer", [])
    return [1.0 if re.search(r"\\d", c) else 0.0 for c in completions]


def length_penalty(prompts, completions, **kwargs):
    return [-len(c) / 1000 for c in completions]
'''
GOOD_PROCESSOR = '''\
def process_data(dataset_name, tokenizer, template, config, x):
    return {"prompts": x["question"], "question": x["question"], "answer": x["answer"]}
'''
GOOD_TEMPLATE = {"SYSTEM_PROMPT": "Think in {reasoning_start_token}...{reasoning_end_token}, "
                                  "answer in {solution_start_token}...{solution_end_token}.",
                 "TEMPLATE": "<|im_start|>user\n{system_prompt}\n\n{question}<|im_end|>\n"}
MODES = [pytest.param(False, id="imported"), pytest.param(True, id="read")]


def _write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text)
    return path


def probe(*, rewards: Path | None = None, functions: str = "", processor: Path | None = None,
          template: Path | None = None, static: bool = False, timeout_s: float = 60.0,
          python: Path = HERE) -> RecipeCheck:
    args: list[str] = []
    if rewards is not None:
        args += ["--rewards", str(rewards), "--functions", functions]
    if processor is not None:
        args += ["--processor", str(processor)]
    if template is not None:
        args += ["--template", str(template)]
    result, missing = run_probe(ProbeRun(python, static=static, timeout_s=timeout_s), args)
    assert missing == []
    return result


def only(result: RecipeCheck) -> Issue:
    assert len(result.issues) == 1, result
    return result.issues[0]


# --- the files as they should be -----------------------------------------------------------

@pytest.mark.parametrize("static", MODES)
def test_a_good_recipe_has_no_problem(tmp_path: Path, static: bool) -> None:
    result = probe(rewards=_write(tmp_path, "r.py", GOOD_REWARD),
                   functions="exact_match,length_penalty",
                   processor=_write(tmp_path, "p.py", GOOD_PROCESSOR),
                   template=_write(tmp_path, "t.json", json.dumps(GOOD_TEMPLATE)), static=static)
    assert result == RecipeCheck()


def test_the_shipped_rehearsal_recipe_and_maxtext_template_pass() -> None:
    """The rehearsal's reward (no tmvp_config parameter, **kwargs) and MaxText 0.2.4's own
    template shape pass; the check is not stricter than MaxText."""
    result = probe(rewards=REPO_ROOT / "images" / "rehearsal" / "rewards.py",
                   functions="ascii_fraction_reward")
    assert result == RecipeCheck()


# --- one test per kind of problem ----------------------------------------------------------

@pytest.mark.parametrize("static", MODES)
def test_a_syntax_error_names_the_file_and_line(tmp_path: Path, static: bool) -> None:
    path = _write(tmp_path, "rewards.py", GOOD_REWARD.replace(
        "def length_penalty(prompts", "def length_penalty(prompts,, "))
    issue = only(probe(rewards=path, functions="exact_match", static=static))
    assert (issue.field, issue.category) == ("recipe.rewards.file", "config/recipe-syntax")
    assert f"{path}:10: SyntaxError" in issue.problem
    assert f"{path}:10" in issue.fix


def test_an_import_the_environment_lacks_names_the_module_and_the_line(tmp_path: Path) -> None:
    path = _write(tmp_path, "rewards.py", "import json\n\nimport tpurl_no_such_module\n"
                  + GOOD_REWARD)
    issue = only(probe(rewards=path, functions="exact_match"))
    assert (issue.field, issue.category) == ("recipe.rewards.file", "config/recipe-missing-module")
    assert f"{path}:3: imports 'tpurl_no_such_module'" in issue.problem
    assert "only what the post-training image has" in issue.fix


def test_a_file_beside_the_rewards_is_not_importable_as_under_maxtext(tmp_path: Path) -> None:
    """MaxText loads the file without putting its folder on sys.path (and GKE ships the file
    alone), so a helper beside it is a missing module here too."""
    _write(tmp_path, "helpers.py", "def score(c):\n    return 1.0\n")
    path = _write(tmp_path, "rewards.py", "from helpers import score\n" + GOOD_REWARD)
    issue = only(probe(rewards=path, functions="exact_match"))
    assert issue.category == "config/recipe-missing-module"
    assert f"{path}:1: imports 'helpers'" in issue.problem


def test_a_reward_served_by_the_modules_getattr_is_found(tmp_path: Path) -> None:
    """MaxText asks with getattr, so a module __getattr__ (the rehearsal's own reward guard
    serves its functions so) counts once imported; read statically it cannot be judged."""
    path = _write(tmp_path, "rewards.py", "def _score(prompts, completions, **kwargs):\n"
                  "    return []\n\n\ndef __getattr__(name):\n    if name == 'served':\n"
                  "        return _score\n    raise AttributeError(name)\n")
    for static in (False, True):
        assert probe(rewards=path, functions="served", static=static) == RecipeCheck()
    assert only(probe(rewards=path, functions="other")).category == "config/recipe-no-function"


@pytest.mark.parametrize(("line", "shown"), [
    ("LIMIT = 1 / 0", "raised ZeroDivisionError: division by zero"),
    ("import sys; sys.exit(3)", "called exit(3)"),
    ("print('hello'); ANSWERS = {}['missing']", "raised KeyError: 'missing'"),
])
def test_an_exception_at_import_names_its_type_and_the_line(tmp_path: Path, line: str,
                                                            shown: str) -> None:
    path = _write(tmp_path, "rewards.py", GOOD_REWARD + f"\n{line}\n")
    issue = only(probe(rewards=path, functions="exact_match"))
    assert (issue.field, issue.category) == ("recipe.rewards.file", "config/recipe-import-error")
    assert f"{path}:13: importing it {shown}" in issue.problem
    assert "runpy.run_path" in issue.fix


def test_an_exception_inside_a_function_the_file_calls_names_the_files_line(
        tmp_path: Path) -> None:
    """The deepest line of the team's own, not the library's that raised."""
    path = _write(tmp_path, "rewards.py", "import json\n\ndef load():\n    return json.loads('{')"
                  "\n\nTABLE = load()\n" + GOOD_REWARD)
    issue = only(probe(rewards=path, functions="exact_match"))
    assert f"{path}:4: importing it raised JSONDecodeError" in issue.problem


@pytest.mark.parametrize("static", MODES)
def test_a_misspelt_reward_function_names_the_closest(tmp_path: Path, static: bool) -> None:
    path = _write(tmp_path, "rewards.py", GOOD_REWARD)
    issue = only(probe(rewards=path, functions="exact_match,lenght_penalty", static=static))
    assert (issue.field, issue.category) == ("recipe.rewards.functions",
                                             "config/recipe-no-function")
    assert issue.problem == (f"{path}: defines no function 'lenght_penalty' (did you mean "
                             "'length_penalty'?)")


@pytest.mark.parametrize("static", MODES)
def test_a_reward_name_with_no_near_match_lists_what_the_file_defines(tmp_path: Path,
                                                                       static: bool) -> None:
    path = _write(tmp_path, "rewards.py", GOOD_REWARD)
    issue = only(probe(rewards=path, functions="bleu", static=static))
    assert "defines no function 'bleu' (it defines exact_match, length_penalty" in issue.problem


@pytest.mark.parametrize("static", MODES)
def test_a_reward_name_that_is_not_callable_is_refused(tmp_path: Path, static: bool) -> None:
    path = _write(tmp_path, "rewards.py", GOOD_REWARD + "\nbonus = 0.5\n")
    issue = only(probe(rewards=path, functions="bonus", static=static))
    assert issue.category == "config/recipe-no-function"
    assert issue.problem == f"{path}:13: 'bonus' is a value of type float, not a function"


@pytest.mark.parametrize("static", MODES)
@pytest.mark.parametrize(("signature", "shown"), [
    ("prompts, completions", "has no **kwargs"),
    ("prompts, completions, tmvp_config", "has no **kwargs"),
    ("prompts, completions, reference, **kwargs", "missing a required argument: 'reference'"),
    ("prompts, completions, /, **kwargs", "'prompts' parameter is positional only"),
    ("*, prompts, completions, weight, **kwargs", "missing a required argument: 'weight'"),
])
def test_a_reward_signature_maxtext_cannot_call_is_refused(tmp_path: Path, static: bool,
                                                           signature: str, shown: str) -> None:
    path = _write(tmp_path, "rewards.py", f"import re\n\ndef score({signature}):\n"
                  "    return [0.0 for _ in completions]\n")
    issue = only(probe(rewards=path, functions="score", static=static))
    assert (issue.field, issue.category) == ("recipe.rewards.functions", "config/recipe-signature")
    assert issue.problem.startswith(f"{path}:3: reward function 'score' ")
    assert shown in issue.problem and "**kwargs" in issue.fix


@pytest.mark.parametrize("static", MODES)
@pytest.mark.parametrize("signature", ["prompts, completions, **kwargs",
                                       "*args, **kwargs",
                                       "prompts, completions, weight=1.0, *, mode='train', **kw",
                                       "prompts, completions, num_generations, beta, **kwargs"])
def test_a_reward_signature_maxtext_can_call_passes(tmp_path: Path, static: bool,
                                                    signature: str) -> None:
    path = _write(tmp_path, "rewards.py", f"def score({signature}):\n    return []\n")
    assert probe(rewards=path, functions="score", static=static) == RecipeCheck()


@pytest.mark.parametrize("static", MODES)
@pytest.mark.parametrize(("source", "kind", "shown"), [
    ("def process(dataset_name, tokenizer, template, config, x):\n    return x\n",
     "config/recipe-no-function", "defines no function 'process_data' (did you mean 'process'?)"),
    ("process_data = {}\n", "config/recipe-no-function", "is a value of type dict"),
    ("def process_data(dataset_name, tokenizer, x):\n    return x\n",
     "config/recipe-signature", "too many positional arguments"),
    ("def process_data(dataset_name, tokenizer, template, config, x, extra):\n    return x\n",
     "config/recipe-signature", "missing a required argument: 'extra'"),
    ("def process_data(*, dataset_name, tokenizer, template, config, x):\n    return x\n",
     "config/recipe-signature", "too many positional arguments"),
])
def test_a_processor_maxtext_cannot_call_is_refused(tmp_path: Path, static: bool, source: str,
                                                    kind: str, shown: str) -> None:
    path = _write(tmp_path, "processor.py", source)
    issue = only(probe(processor=path, static=static))
    assert (issue.field, issue.category) == ("recipe.dataset_processor", kind)
    assert shown in issue.problem and str(path) in issue.problem
    assert "def process_data(dataset_name, tokenizer, template, config, x)" in issue.fix


@pytest.mark.parametrize(("text", "line", "shown"), [
    ('{"SYSTEM_PROMPT": "a",\n "TEMPLATE": "{question}",}', 2, "is not valid JSON"),
    ('["SYSTEM_PROMPT", "TEMPLATE"]', None, "holds a JSON list, not an object"),
    ('{"SYSTEM_PROMPT": "a"}', None, "has no TEMPLATE"),
    ('{"TEMPLATE": "{question}"}', None, "has no SYSTEM_PROMPT"),
    ('{"SYSTEM_PROMPT": "a {answer_token}",\n "TEMPLATE": "{question}"}', 1,
     "SYSTEM_PROMPT has the placeholder {answer_token}, which MaxText does not fill"),
    ('{"SYSTEM_PROMPT": "a",\n "TEMPLATE": "{system_prompt} {}"}', 2,
     "TEMPLATE has a positional placeholder"),
    ('{"SYSTEM_PROMPT": "a",\n "TEMPLATE": "{system_prompt} {question"}', 2,
     "TEMPLATE is not a format string MaxText can fill"),
    ('{"SYSTEM_PROMPT": 3, "TEMPLATE": "{question}"}', 1, "SYSTEM_PROMPT is int 3, not text"),
    ('{"SYSTEM_PROMPT": "a",\n\n "TEMPLATE": "{system_prompt}"}', 3, "TEMPLATE has no {question}"),
])
def test_a_template_maxtext_cannot_fill_is_refused(tmp_path: Path, text: str, line: int | None,
                                                   shown: str) -> None:
    path = _write(tmp_path, "template.json", text)
    for static in (False, True):
        issue = only(probe(template=path, static=static))
        assert (issue.field, issue.category) == ("recipe.chat_template", "config/recipe-template")
        assert shown in issue.problem
        assert issue.problem.startswith(f"{path}:{line}: " if line else f"{path}: ")


def test_with_a_processor_of_its_own_the_template_keys_are_warnings(tmp_path: Path) -> None:
    """The team's process_data gets the template as it is; only the JSON object is required
    (MaxText stops without one)."""
    processor = _write(tmp_path, "p.py", GOOD_PROCESSOR)
    keys = _write(tmp_path, "t.json", '{"PROMPT": "{question}"}')
    result = probe(processor=processor, template=keys)
    assert result.issues == () and len(result.warnings) == 2
    assert all("recipe.chat_template" in w for w in result.warnings)
    broken = _write(tmp_path, "u.json", "{")
    assert only(probe(processor=processor, template=broken)).category == "config/recipe-template"


# --- the time limit ------------------------------------------------------------------------

@pytest.mark.parametrize(("role", "field"), [("rewards", "recipe.rewards.file"),
                                             ("processor", "recipe.dataset_processor")])
def test_a_file_that_loops_at_import_is_refused_within_the_limit(tmp_path: Path, role: str,
                                                                 field: str) -> None:
    path = _write(tmp_path, f"{role}.py", "while True:\n    pass\n")
    good = _write(tmp_path, "good.py", GOOD_REWARD)
    kwargs = ({"rewards": path, "functions": "exact_match"} if role == "rewards"
              else {"rewards": good, "functions": "exact_match", "processor": path})
    issue = only(probe(timeout_s=2, **kwargs))  # type: ignore[arg-type]
    assert (issue.field, issue.category) == (field, "config/recipe-import-timeout")
    assert issue.problem == f"{path}: did not finish importing within 2 s"


def test_a_file_that_kills_its_process_at_import_is_named(tmp_path: Path) -> None:
    path = _write(tmp_path, "rewards.py", "import os\nos._exit(7)\n")
    issue = only(probe(rewards=path, functions="x"))
    assert (issue.field, issue.category) == ("recipe.rewards.file", "config/recipe-import-error")
    assert f"{path}: importing it ended the process (exit 7)" in issue.problem


# --- which interpreter, and the command line ---------------------------------------------

def _profile(**fields: str) -> Profile:
    return load_profile("rehearsal", fields, environ={})


def test_without_the_venv_the_files_are_read_and_a_warning_says_what_builds_it(
        tmp_path: Path) -> None:
    rewards = _write(tmp_path, "rewards.py", "import tpurl_no_such_module\n" + GOOD_REWARD)
    profile = _profile(**{"recipe.rewards.file": str(rewards),
                                    "recipe.rewards.functions": "exact_match,lenght_penalty",
                                    "local.venv": str(tmp_path / "no-venv")})
    result = check_recipe(profile)
    assert [i.problem for i in result.issues] == [
        f"{rewards}: defines no function 'lenght_penalty' (did you mean 'length_penalty'?)"]
    (warning,) = result.warnings
    assert "imports of its Python files were not checked" in warning
    assert str(tmp_path / "no-venv" / "bin" / "python") in warning
    assert "bash scripts/rehearse.sh" in warning


def test_a_processor_that_imports_maxtext_is_checked_where_maxtext_is(tmp_path: Path) -> None:
    """Under the rehearsal venv a file importing MaxText's own modules imports (MaxText's
    utils_rl included, which fails alone unless multiprocessing.pool is loaded, as train_rl
    has it), and a MaxText module that does not exist is named. Without the venv the same
    profile takes the static path: no import is judged, and the warning says so."""
    processor = _write(tmp_path, "processor.py", "from maxtext.trainers.post_train.rl import "
                       "utils_rl\n\n\ndef process_data(dataset_name, tokenizer, template, config,"
                       " x):\n    return utils_rl.process_data(dataset_name, tokenizer, "
                       "template, config, x)\n")
    missing = _write(tmp_path, "missing.py", "import maxtext.no_such_part\n" + GOOD_PROCESSOR)
    if REHEARSAL_PYTHON.is_file():
        run = ProbeRun(REHEARSAL_PYTHON, static=False, require=IMAGE_MODULES, timeout_s=120)
        assert run_probe(run, ["--processor", str(processor)]) == (RecipeCheck(), [])
        found, _ = run_probe(run, ["--processor", str(missing)])
        issue = only(found)
        assert issue.category == "config/recipe-missing-module"
        assert f"{missing}:1: imports 'maxtext.no_such_part'" in issue.problem
    else:
        for path in (processor, missing):
            profile = _profile(**{"recipe.dataset_processor": str(path)})
            result = check_recipe(profile)
            assert result.issues == ()
            assert "were not checked" in result.warnings[-1]


def test_a_venv_without_maxtext_is_not_taken_for_the_image(tmp_path: Path) -> None:
    """A venv at local.venv that lacks MaxText (half built) would blame the team's imports
    for what the venv lacks: the check reads the files instead and says why."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    rewards = _write(tmp_path, "rewards.py", "import tpurl_no_such_module\n" + GOOD_REWARD)
    profile = _profile(**{"recipe.rewards.file": str(rewards),
                                    "recipe.rewards.functions": "exact_match",
                                    "local.venv": str(venv)})
    result = check_recipe(profile)
    assert result.issues == ()
    assert "lacks maxtext, tunix (a venv not fully built)" in result.warnings[-1]


def test_validate_refuses_a_broken_recipe_with_its_messages(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rewards = _write(tmp_path, "rewards.py", GOOD_REWARD.replace("return [-len", "return [-len("))
    code = main(["validate", "rehearsal", "--set", f"recipe.rewards.file={rewards}",
                 "--set", "recipe.rewards.functions=exact_match", "--set",
                 f"local.venv={tmp_path / 'no-venv'}", "--set", f"local.root={tmp_path / 'root'}"])
    err = capsys.readouterr().err
    assert code == 2
    assert f"recipe.rewards.file: {rewards}:11: SyntaxError" in err
    assert "fix: correct the syntax at" in err


def test_tpurl_check_lists_the_recipe_as_a_finding(tmp_path: Path) -> None:
    from flows.operations.check import _recipe_findings

    rewards = _write(tmp_path, "rewards.py", GOOD_REWARD)
    fields = {"recipe.rewards.file": str(rewards), "local.venv": str(tmp_path / "no-venv")}
    broken = _recipe_findings(_profile(**fields, **{"recipe.rewards.functions": "exact"}))
    assert [(f.what, f.ok, f.code) for f in broken] == [
        ("recipe.rewards.functions", False, "config/recipe-no-function")]
    good = _recipe_findings(_profile(**fields, **{"recipe.rewards.functions": "exact_match"}))
    assert [(f.what, f.ok) for f in good] == [("recipe", True), ("recipe", None)]
    assert "were not checked" in good[1].detail


def test_the_flow_start_refuses_a_broken_recipe_before_any_side_effect(
        prefect_api: None, tmp_path: Path) -> None:
    """The real flow on a Prefect API: prepare() refuses the recipe with the same issue
    before any stage, so nothing is written under the run's root."""
    from flows.pipeline import rl_post_training

    rewards = _write(tmp_path, "rewards.py", GOOD_REWARD)
    root = tmp_path / "root"
    state = rl_post_training(profile="rehearsal", overrides={
        "recipe.rewards.file": str(rewards), "recipe.rewards.functions": "exact",
        "local.venv": str(tmp_path / "no-venv"), "local.root": str(root)}, return_state=True)
    assert state.is_failed()
    error = state.result(raise_on_failure=False)
    assert isinstance(error, ProfileError), error
    assert [(i.field, i.category) for i in error.issues] == [
        ("recipe.rewards.functions", "config/recipe-no-function")]
    assert "did you mean 'exact_match'?" in str(error)
    assert not root.exists() or not any(root.iterdir())


# --- garbled files ------------------------------------------------------------------------

_EDITS = st.lists(st.tuples(st.integers(0, len(GOOD_REWARD)), st.integers(0, 12),
                            st.sampled_from(["", "(", ")", ":", " ", "\n", "\t", "x", "'", '"',
                                             "**", "def ", "import ", "\\", "{", "é", "\x00"])),
                  min_size=1, max_size=4)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(edits=_EDITS, cut=st.integers(0, len(GOOD_REWARD)), static=st.booleans())
def test_a_garbled_reward_file_yields_no_problem_or_one_naming_the_file(
        tmp_path: Path, edits: list[tuple[int, int, str]], cut: int, static: bool) -> None:
    text = GOOD_REWARD
    for at, length, insert in edits:
        text = text[:at] + insert + text[at + length:]
    path = tmp_path / "garbled.py"
    path.write_text(text[:cut] if cut % 3 == 0 else text)
    result = probe(rewards=path, functions="exact_match,length_penalty", static=static,
                   timeout_s=20)
    for issue in result.issues:
        assert issue.field.startswith("recipe.rewards.")
        assert str(path) in issue.problem, issue
        assert issue.category != "config/recipe-unchecked", issue
        assert "Traceback" not in issue.problem and "check_recipe.py" not in issue.problem, issue
    assert not [w for w in result.warnings if "could not run" in w], result.warnings
