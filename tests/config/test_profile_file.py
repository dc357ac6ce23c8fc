"""A profile that extends another: the merge, its refusals, and what a reader of the file gets."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from flows.cli import main
from flows.config import ProfileError, load_profile
from flows.config.profile_file import MAX_BASES, merged, read_profile_file
from tests.support.profiles import TUTORIAL, TUTORIAL_REQUIRED

keys = st.sampled_from(["a", "b", "c"])
leaves = st.one_of(st.integers(), st.text(max_size=3), st.none(), st.lists(st.integers(), max_size=2))
trees = st.recursive(leaves, lambda inner: st.dictionaries(keys, inner, max_size=3), max_leaves=8)
mappings = st.dictionaries(keys, trees, max_size=3)


@given(mappings, mappings, mappings)
def test_a_chain_reads_as_each_file_over_the_ones_before_it(a, b, c):
    """Three files, c extending b extending a, read as a, then b over it, then c over that.
    (Not however grouped: merging is not associative when a middle file replaces a mapping
    with a value and a later one writes a mapping there again.)"""
    before = repr((a, b, c))
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "a.yaml").write_text(yaml.safe_dump(a))
        (root / "b.yaml").write_text(yaml.safe_dump({"extends": "a.yaml", **b}))
        (root / "c.yaml").write_text(yaml.safe_dump({"extends": "b.yaml", **c}))
        assert read_profile_file(root / "c.yaml") == merged(merged(a, b), c)
    assert merged(a, {}) == a and merged({}, b) == b
    assert repr((a, b, c)) == before  # neither argument changed
    out = merged(a, b)
    for key, value in b.items():
        if not (isinstance(value, dict) and isinstance(a.get(key), dict)):
            assert out[key] == value
    assert all(out[key] == value for key, value in a.items() if key not in b)


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_a_teams_profile_is_the_tutorials_with_three_fields_changed(tmp_path):
    mine = _write(tmp_path / "ours.yaml", f"extends: {TUTORIAL}\nname: ours\n"
                  "train:\n  args:\n    learning_rate: 2e-6\n"
                  "gke:\n  bucket: our-bucket\n")
    ours = load_profile(str(mine), {k: v for k, v in TUTORIAL_REQUIRED.items()
                                    if k != "gke.bucket"}, environ={})
    theirs = load_profile(TUTORIAL, TUTORIAL_REQUIRED, environ={})
    assert ours.name == "ours" and ours.gke is not None and ours.gke.bucket == "our-bucket"
    assert str(ours.train.args["learning_rate"]) == "2e-6"
    # the rest of train.args is the base's: a mapping merges, it does not replace
    assert {k: v for k, v in ours.train.args.items() if k != "learning_rate"} == \
        {k: v for k, v in theirs.train.args.items() if k != "learning_rate"}
    assert ours.model == theirs.model


def test_null_removes_a_base_value_and_a_list_replaces_the_bases(tmp_path):
    mine = _write(tmp_path / "dense.yaml", "extends: rehearsal\nname: dense\n"
                  "model:\n  args:\n    base_moe_mlp_dim: null\n"
                  "recipe:\n  rewards:\n    functions: [ascii_fraction_reward]\n")
    data = read_profile_file(mine)
    assert data["model"]["args"]["base_moe_mlp_dim"] is None
    profile = load_profile(str(mine), {}, environ={})
    assert "base_moe_mlp_dim" not in profile.model.args
    assert profile.recipe.rewards is not None
    assert tuple(profile.recipe.rewards.functions) == ("ascii_fraction_reward",)


def test_a_base_beside_the_file_keeps_its_recipe_beside_itself(tmp_path):
    team = tmp_path / "team"
    team.mkdir()
    _write(team / "rewards.py", "def tidy(prompts, completions, **kw):\n"
           "    return [1.0 for _ in completions]\n")
    _write(team / "base.yaml", "extends: rehearsal\nname: team-base\n"
           "recipe:\n  rewards:\n    file: rewards.py\n    functions: [tidy]\n")
    elsewhere = tmp_path / "people" / "me"
    elsewhere.mkdir(parents=True)
    mine = _write(elsewhere / "mine.yaml", "extends: ../../team/base.yaml\nname: mine\n")
    profile = load_profile(str(mine), {}, environ={})
    assert profile.recipe.rewards is not None
    assert Path(profile.recipe.rewards.file) == (team / "rewards.py").resolve()


@pytest.mark.parametrize(("text", "problem"), [
    ("extends: 3\n", "must be a profile's name or a YAML file's path, not 3"),
    ("extends: ''\n", "must be a profile's name or a YAML file's path"),
    ("extends: no-such-profile\n", "names 'no-such-profile', and there is no file at"),
    ("extends: missing.yaml\n", "names 'missing.yaml', and there is no file at"),
])
def test_a_base_that_cannot_be_read_is_refused_naming_extends(tmp_path, text, problem):
    mine = _write(tmp_path / "mine.yaml", text + "name: mine\n")
    with pytest.raises(ProfileError) as err:
        load_profile(str(mine), {}, environ={})
    (issue,) = err.value.issues
    assert issue.field == "extends" and problem in issue.problem
    assert issue.category in ("config/extends", "config/not-found")
    assert "rehearsal" in issue.fix  # the fix names what may be extended


def test_a_loop_is_refused_naming_every_file_of_it(tmp_path):
    _write(tmp_path / "a.yaml", "extends: b.yaml\nname: a\n")
    _write(tmp_path / "b.yaml", "extends: a.yaml\nname: b\n")
    with pytest.raises(ProfileError) as err:
        load_profile(str(tmp_path / "a.yaml"), {}, environ={})
    (issue,) = err.value.issues
    assert issue.category == "config/extends" and "a.yaml → b.yaml → a.yaml" in issue.problem


def test_a_chain_longer_than_the_limit_is_refused(tmp_path):
    _write(tmp_path / "p0.yaml", "extends: rehearsal\nname: p0\n")
    for n in range(1, MAX_BASES + 1):
        _write(tmp_path / f"p{n}.yaml", f"extends: p{n - 1}.yaml\nname: p{n}\n")
    load_profile(str(tmp_path / f"p{MAX_BASES - 1}.yaml"), {}, environ={})  # at the limit
    with pytest.raises(ProfileError) as err:
        load_profile(str(tmp_path / f"p{MAX_BASES}.yaml"), {}, environ={})
    assert err.value.issues[0].category == "config/extends"


def test_a_broken_base_is_named_as_the_file_at_fault(tmp_path):
    _write(tmp_path / "base.yaml", "name: [unclosed\n")
    mine = _write(tmp_path / "mine.yaml", "extends: base.yaml\nname: mine\n")
    with pytest.raises(ProfileError) as err:
        load_profile(str(mine), {}, environ={})
    assert err.value.source.endswith("base.yaml") and err.value.issues[0].category == "config/yaml"


def test_validate_shows_the_merged_profile(tmp_path, capsys):
    mine = _write(tmp_path / "mine.yaml", "extends: rehearsal\nname: mine\n"
                  "train:\n  args:\n    learning_rate: 5e-3\n")
    assert main(["validate", str(mine)]) == 0
    assert "is valid" in capsys.readouterr().out


# A profile's name is its own: the file's stem. The name picks the team (its budget and
# queue), the profile lock and the promotion pointer, so a name taken from a base, a line or
# an override would charge a run to another team and take its lock.

def test_a_file_that_extends_another_teams_profile_is_named_by_its_own_stem(
        tmp_path, monkeypatch):
    """A file extending the tutorial's profile without a name of its own: the base's name
    does not pass on, so the run is not the tutorial team's."""
    from flows.config.teams import TEAMS_ENV, TEAMS_FILE, load_teams

    monkeypatch.setenv(TEAMS_ENV, str(TEAMS_FILE))
    mine = _write(tmp_path / "borrowed.yaml", f"extends: {TUTORIAL}\n")
    profile = load_profile(str(mine), TUTORIAL_REQUIRED, environ={})
    assert profile.name == "borrowed"
    assert load_teams().team_of(profile.name) is None
    assert load_teams().team_of(TUTORIAL) is not None  # the base's is a team's


@pytest.mark.parametrize("how", ["line", "override"])
def test_a_name_other_than_the_files_stem_is_refused(tmp_path, how):
    text = f"extends: {TUTORIAL}\n" + (f"name: {TUTORIAL}\n" if how == "line" else "")
    mine = _write(tmp_path / "mine.yaml", text)
    extra = {"name": TUTORIAL} if how == "override" else {}
    with pytest.raises(ProfileError) as err:
        load_profile(str(mine), {**TUTORIAL_REQUIRED, **extra}, environ={})
    (issue,) = err.value.issues
    assert issue.field == "name" and issue.category == "config/profile-name", issue
    assert "mine" in issue.problem and TUTORIAL in issue.problem
    # following the fix: the line gone (or the name of the file written), the file loads
    _write(tmp_path / "mine.yaml", f"extends: {TUTORIAL}\nname: mine\n")
    assert load_profile(str(mine), TUTORIAL_REQUIRED, environ={}).name == "mine"


def test_extends_by_name_stays_in_the_profiles_folder(tmp_path):
    """``extends: NAME`` with a path in the name (no .yaml ending) is refused, not read from
    outside deployments/profiles."""
    import os

    from flows.common.paths import PROFILES_DIR

    planted = _write(tmp_path / "planted.yaml", (PROFILES_DIR / f"{TUTORIAL}.yaml").read_text()
                     .replace("max_usd_per_run", "max_usd_per_run_was"))
    escape = os.path.relpath(planted.with_suffix(""), PROFILES_DIR)
    assert escape.startswith("..")
    mine = _write(tmp_path / "mine.yaml", f"extends: {escape}\n")
    with pytest.raises(ProfileError) as err:
        load_profile(str(mine), TUTORIAL_REQUIRED, environ={})
    (issue,) = err.value.issues
    assert issue.field == "extends" and issue.category == "config/extends", issue
    assert "not a profile name" in issue.problem


@pytest.mark.parametrize("where", ["the profile", "its base"])
def test_a_symlink_loop_is_a_clear_error(tmp_path, where):
    (tmp_path / "a.yaml").symlink_to("b.yaml")
    (tmp_path / "b.yaml").symlink_to("a.yaml")
    target = tmp_path / "a.yaml"
    if where == "its base":
        target = _write(tmp_path / "mine.yaml", "extends: a.yaml\n")
    with pytest.raises(ProfileError) as err:
        load_profile(str(target), {}, environ={})
    (issue,) = err.value.issues
    assert "symbolic links" in issue.problem and "a.yaml" in issue.problem, issue
    assert issue.category in ("config/extends", "config/not-found"), issue
