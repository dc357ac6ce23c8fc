"""The recipe section as a profile's owner and a deployment's run meet it
(flows/config/recipe.py): every field optional, the CLI's comma list, paths anchored beside
the profile, each mistake refused naming its field and fix, and never run-tunable."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flows.common.paths import PROFILES_DIR, REPO_ROOT
from flows.config import ProfileError, load_profile, profile_names
from flows.config.env_overrides import env_name
from flows.config.recipe import RecipeSection
from flows.core.layout import convert_key, dataset_key, image_key, train_key
from flows.core.lineage import config_key
from flows.core.recipe_files import recipe_key_parts
from tests.support.profiles import required_overrides

REWARDS = "def a(**kw):\n    return [0.0]\n\n\ndef b(**kw):\n    return [1.0]\n"
FIXED = "is fixed by the deployment"


@pytest.fixture
def recipe_dir(tmp_path: Path) -> Path:
    (tmp_path / "rewards.py").write_text(REWARDS)
    (tmp_path / "process.py").write_text("def process_data(*args):\n    return args\n")
    (tmp_path / "template.json").write_text('{"SYSTEM_PROMPT": "s", "TEMPLATE": "{question}"}')
    return tmp_path


def _issues(name: str, overrides: dict[str, str]) -> dict[str, tuple[str, str]]:
    with pytest.raises(ProfileError) as refused:
        load_profile(name, {**required_overrides(name), **overrides}, environ={})
    return {i.field: (i.problem, i.fix) for i in refused.value.issues}


@pytest.mark.parametrize("name", [n for n in profile_names() if not n.startswith("rehearsal")])
def test_a_profile_without_a_recipe_keeps_the_keys_it_had(name: str) -> None:
    """No recipe adds nothing to a key: train_key is the one from before recipes existed
    (the same four parts), so a deployed profile's trained runs are found again. Measured
    once against the commit before recipes: 196b2125993b (tutorial), 652112da3c6f (smoke)."""
    profile = load_profile(name, required_overrides(name), environ={})
    assert profile.recipe == RecipeSection() and profile.recipe.is_builtin()
    assert recipe_key_parts(profile) == ()
    assert train_key(profile) == config_key("train", convert_key(profile), profile.train.args,
                                            image_key(profile), dataset_key(profile))


def test_the_cli_gives_the_functions_as_a_comma_list(recipe_dir: Path) -> None:
    profile = load_profile("rehearsal", {"recipe.rewards.file": str(recipe_dir / "rewards.py"),
                                         "recipe.rewards.functions": "a, b"}, environ={})
    assert profile.recipe.rewards is not None
    assert profile.recipe.rewards.functions == ("a", "b")
    assert profile.recipe.rewards.file == str(recipe_dir / "rewards.py")
    # the environment's form is the same text
    environ = {env_name("recipe.rewards.functions"): "b,a"}
    again = load_profile("rehearsal", environ=environ)
    assert again.recipe.rewards is not None and again.recipe.rewards.functions == ("b", "a")


def test_every_field_is_optional(recipe_dir: Path) -> None:
    only = {"recipe.dataset_processor": str(recipe_dir / "process.py")}
    profile = load_profile("smoke-qwen3-0.6b-v6e-8", {**required_overrides(
        "smoke-qwen3-0.6b-v6e-8"), **only}, environ={})
    assert profile.recipe.rewards is None and profile.recipe.chat_template is None
    assert not profile.recipe.is_builtin()
    assert recipe_key_parts(profile) != ()


def _profile_beside(tmp_path: Path, recipe_yaml: str) -> Path:
    """The rehearsal profile copied to ``tmp_path`` with its own recipe section."""
    text = (PROFILES_DIR / "rehearsal.yaml").read_text()
    head, _, tail = text.partition("\nrecipe:\n")
    assert tail, "the rehearsal profile names its recipe"
    rest = tail.split("\n\n", 1)[1]  # the sections after the recipe's
    path = tmp_path / "rehearsal.yaml"
    path.write_text(f"{head}\nrecipe:\n{recipe_yaml}\n\n{rest}")
    return path


def test_a_relative_path_beside_the_profile_is_anchored_there(recipe_dir: Path) -> None:
    path = _profile_beside(recipe_dir, "  rewards:\n    file: rewards.py\n    functions: [a, b]\n"
                                       "  chat_template: template.json")
    profile = load_profile(str(path), environ={})
    assert profile.recipe.rewards is not None
    assert profile.recipe.rewards.file == str((recipe_dir / "rewards.py").resolve())
    assert profile.recipe.chat_template == str((recipe_dir / "template.json").resolve())
    # a --set path is anchored the same way
    shutil.copy(recipe_dir / "rewards.py", recipe_dir / "other.py")
    other = load_profile(str(path), {"recipe.rewards.file": "other.py"}, environ={})
    assert other.recipe.rewards is not None
    assert other.recipe.rewards.file == str((recipe_dir / "other.py").resolve())


def test_a_relative_path_not_beside_the_profile_is_read_under_the_repository(
        recipe_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # not the current directory's either
    path = _profile_beside(recipe_dir, "  rewards:\n    file: images/rehearsal/rewards.py\n"
                                       "    functions: [ascii_fraction_reward]")
    profile = load_profile(str(path), environ={})
    assert profile.recipe.rewards is not None
    assert profile.recipe.rewards.file == "images/rehearsal/rewards.py"
    assert (REPO_ROOT / profile.recipe.rewards.file).is_file()
    # and one found in neither place is refused, saying where it looked
    problem, _ = _issues(str(path), {"recipe.rewards.file": "nowhere.py"})["recipe.rewards.file"]
    assert "'nowhere.py' is not a file" in problem and str(REPO_ROOT / "nowhere.py") in problem


@pytest.mark.parametrize(("overrides", "field", "problem", "fix"), [
    ({"recipe.rewards.file": "{d}/missing.py"}, "recipe.rewards.file", "is not a file",
     "recipe.rewards.file="),
    ({"recipe.rewards.file": "{d}/template.json"}, "recipe.rewards.file", "is not a .py file",
     "recipe.rewards.file="),
    ({"recipe.rewards.functions": "a,class"}, "recipe.rewards.functions",
     "'class' is not a Python function name", "recipe.rewards.functions=a,b"),
    ({"recipe.rewards.functions": "a,1b"}, "recipe.rewards.functions",
     "'1b' is not a Python function name", "recipe.rewards.functions=a,b"),
    ({"recipe.rewards.functions": "a,b,a"}, "recipe.rewards.functions", "names a function twice",
     "list each function once"),
    ({"recipe.rewards.functions": ",,"}, "recipe.rewards.functions", "names no function",
     "recipe.rewards.functions="),
    ({"recipe.dataset_processor": "{d}/template.json"}, "recipe.dataset_processor",
     "is not a .py file", "recipe.dataset_processor="),
    ({"recipe.dataset_processor": "{d}/gone.py"}, "recipe.dataset_processor", "is not a file",
     "recipe.dataset_processor="),
    ({"recipe.chat_template": "{d}/rewards.py"}, "recipe.chat_template", "is not a .json file",
     "MaxText reads only .json"),
    ({"train.args.reward_functions_path": "{d}/rewards.py"}, "train.args.reward_functions_path",
     "recipe code", "set recipe.rewards.file instead"),
    ({"train.args.reward_functions": "a"}, "train.args.reward_functions", "recipe code",
     "set recipe.rewards.functions instead"),
    ({"train.args.dataset_processor_path": "{d}/process.py"}, "train.args.dataset_processor_path",
     "recipe code", "set recipe.dataset_processor instead"),
])
def test_a_mistake_is_refused_naming_the_field_and_the_fix(
        recipe_dir: Path, overrides: dict[str, str], field: str, problem: str,
        fix: str) -> None:
    given_ = {"recipe.rewards.file": str(recipe_dir / "rewards.py"),
              "recipe.rewards.functions": "a,b",
              **{k: v.format(d=recipe_dir) for k, v in overrides.items()}}
    issues = _issues("rehearsal", given_)
    assert field in issues, issues
    said, how = issues[field]
    assert problem in said and fix in how, issues[field]


@pytest.mark.parametrize("name", profile_names())
def test_a_recipe_template_takes_each_shipped_profiles_place(recipe_dir: Path,
                                                             name: str) -> None:
    """Every shipped profile names MaxText's built-in template; a team's recipe template
    replaces it, and the training program is given the recipe's template alone."""
    from flows.operations.plan import planned_workloads

    template = str(recipe_dir / "template.json")
    profile = load_profile(name, {**required_overrides(name), "recipe.chat_template": template},
                           environ={})
    assert profile.recipe.chat_template == template
    assert "data_template_path" not in profile.train.args
    argv = planned_workloads(profile)["train"].argv
    given_ = [a for a in argv if a.startswith("data_template_path=")]
    assert len(given_) == 1 and given_[0].endswith("template.json"), given_
    assert "openmathinstruct2_rl.json" not in " ".join(argv)


# --- a deployment's run -------------------------------------------------------------------

RECIPE_FIELDS = ("recipe", "recipe.rewards", "recipe.rewards.file", "recipe.rewards.functions",
                 "recipe.dataset_processor", "recipe.chat_template")


def _as_run(name: str, overrides: dict[str, str]) -> None:
    env = {env_name(k): v for k, v in required_overrides(name).items()}
    load_profile(name, overrides, environ=env, origin="deployment", deployed_env=env)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(["rehearsal", "qwen3-30b-a3b-v6e-32"]),
       field=st.sampled_from(RECIPE_FIELDS),
       value=st.one_of(st.sampled_from(["", "images/rehearsal/rewards.py",
                                        "ascii_fraction_reward", "a,b", "/tmp/evil.py",
                                        "deployments/profiles/rehearsal.yaml"]),
                       st.text(max_size=20)))
def test_a_run_cannot_set_any_recipe_field(name: str, field: str, value: str) -> None:
    """The recipe is code: whatever a run's overrides give a recipe field (the same value,
    another file, nothing), the run is refused naming exactly that field."""
    with pytest.raises(ProfileError) as refused:
        _as_run(name, {field: value})
    named = {i.field: i.problem for i in refused.value.issues}
    assert list(named) == [field]
    assert FIXED in named[field]


def test_a_relative_path_on_the_command_line_is_read_from_the_current_directory(
        recipe_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--set recipe.rewards.file=rewards.py` means what it means in a shell: the file in
    the directory the command runs in, when none of that name sits beside the profile."""
    monkeypatch.chdir(recipe_dir)
    profile = load_profile("rehearsal", {"recipe.rewards.file": "rewards.py",
                                         "recipe.rewards.functions": "a"}, environ={})
    assert profile.recipe.rewards is not None
    assert profile.recipe.rewards.file == str((recipe_dir / "rewards.py").resolve())
