"""What a deployment declares, read from its record (flows/deployed/declared.py): the
boundaries of each reading, as pure functions (the API read itself is proven against a real
server by tests/test_refused_overrides.py)."""

from __future__ import annotations

from flows.deployed.declared import Declared, declared_env, declared_overrides, declared_profile


def test_the_env_variable_and_the_upper_case_variables_are_the_environment() -> None:
    variables = {"env": {"B": "from-env", "c": "3"}, "A": "1", "B": "named", "Z9_": "z",
                 "image": "img", "stream_output": True, "Ab": "x", "9A": "x", "_A": "x",
                 "A-B": "x", "A B": "x"}
    # one letter is a name; a lower-case letter anywhere, a leading digit or underscore, a
    # dash or a space is none (the whole name must match); the env entry wins a clash
    assert declared_env(variables) == {"A": "1", "B": "from-env", "Z9_": "z", "c": "3"}
    assert Declared({}, variables).env == declared_env(variables)


def test_an_env_that_is_no_mapping_adds_nothing_and_none_is_no_env() -> None:
    assert declared_env({"env": "A=2", "A": "1"}) == {"A": "1"}
    assert declared_env({"env": ["A=2"]}) == {}
    assert declared_env({"env": None}) == {} and declared_env({}) == {}


def test_the_declared_overrides_are_a_copy_and_only_a_mapping_counts() -> None:
    mine = {"rl.steps": 3}
    declared = Declared({"overrides": mine})
    copy = declared.overrides
    assert copy == {"rl.steps": 3}
    copy["rl.steps"] = 4
    assert mine == {"rl.steps": 3} and declared.overrides == {"rl.steps": 3}
    for given in ("rl.steps=3", ["rl.steps=3"], None, 3):
        assert declared_overrides({"overrides": given}) == {}
    assert declared_overrides({}) == {}


def test_the_declared_profile_is_a_string_or_none() -> None:
    assert declared_profile({"profile": "team-a"}) == "team-a"
    assert declared_profile({"profile": ""}) == ""
    for given in (None, 3, ["team-a"], {"name": "team-a"}):
        assert declared_profile({"profile": given}) is None
    assert declared_profile({}) is None and Declared({"profile": "p"}).profile == "p"
