"""A deployment's run may change only run-tunable fields: the whole class, not examples.

Every field path of every shipped profile (the schema's, the file's and each section's) is
either tunable and accepted, or refused with an issue naming exactly that path; hypothesis
over override dicts (dotted and malformed keys, empty strings, None, lists, mappings) never
changes a field that is not tunable. The CLI keeps every field.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from flows.common.paths import REPO_ROOT
from flows.config import Profile, ProfileError, load_profile, profile_names
from flows.config.env_overrides import env_name, model_in
from flows.config.maxtext_keys import unknown_key
from flows.config.profile import TUNABLE_TRAIN_ARGS
from flows.config.run_overrides import refusal, tunable_fields
from tests.support.profiles import required_overrides

PROFILES = profile_names()
FIXED = "is fixed by the deployment"


def _environ(name: str) -> dict[str, str]:
    """The deployment's env: what the shipped profile leaves for its owner to fill in."""
    return {env_name(field): value for field, value in required_overrides(name).items()}


def _as_run(name: str, overrides: dict[str, Any]) -> Profile:
    env = _environ(name)  # the deployment's own job_variables.env, as prefect.yaml declares
    return load_profile(name, overrides, environ=env, origin="deployment", deployed_env=env)


def _schema_paths(model: type[BaseModel], prefix: str = "") -> Iterator[str]:
    for field, info in model.model_fields.items():
        path = f"{prefix}{field}"
        yield path
        if (section := model_in(info.annotation)) is not None:
            yield from _schema_paths(section, path + ".")


def _data_paths(value: Any, prefix: str = "") -> Iterator[str]:
    """Every key path of a profile as dumped (a map's keys too: args, prices); MaxText's
    dotted keys (rl.num_generations) stay one part, as the loader keeps them."""
    if isinstance(value, dict):
        for key, item in value.items():
            path = f"{prefix}{key}"
            yield path
            yield from _data_paths(item, path + ".")


def _field_paths(name: str) -> list[str]:
    dumped = load_profile(name, required_overrides(name), environ={}).model_dump(mode="json")
    return sorted(set(_schema_paths(Profile)) | set(_data_paths(dumped)))


def _lacks_optional_section(name: str, path: str) -> bool:
    """A tunable field below an optional section the profile has not (eval on GKE)."""
    profile = load_profile(name, required_overrides(name), environ={})
    head = path.split(".")[0]
    info = Profile.model_fields[head]
    return info.default is None and getattr(profile, head) is None and "." in path


def _current(profile: Profile, path: str) -> Any:
    node: Any = profile.model_dump(mode="json")
    head, _, rest = path.partition(".args.")
    parts = [*head.split("."), "args", rest] if rest else path.split(".")
    for part in parts:
        node = node.get(part) if isinstance(node, dict) else None
    return node


@pytest.mark.parametrize("name", PROFILES)
def test_every_field_path_is_tunable_and_accepted_or_refused_by_its_own_name(name: str) -> None:
    baseline = load_profile(name, required_overrides(name), environ={})
    seen_tunable = seen_fixed = 0
    for path in _field_paths(name):
        current = _current(baseline, path)
        value = "" if current is None or isinstance(current, dict | list) else str(current)
        if path in tunable_fields() and not _lacks_optional_section(name, path):
            assert _as_run(name, {path: value}) is not None, path
            seen_tunable += 1
            continue
        with pytest.raises(ProfileError) as refused:
            _as_run(name, {path: value})
        named = {issue.field: issue for issue in refused.value.issues}
        assert path in named, (path, str(refused.value))
        assert FIXED in named[path].problem and "overrides parameter" in named[path].problem
        assert "tpurl run PROFILE --set" in named[path].fix
        seen_fixed += 1
    assert seen_tunable >= 3 and seen_fixed > seen_tunable


@pytest.mark.parametrize("name", PROFILES)
@pytest.mark.parametrize("attack", [
    {"image.base": "docker.io/attacker/evil:1"}, {"model.hf_token.env": "PREFECT_API_KEY"},
    {"model.hf_token.secret_block": "other"}, {"model.hf_token.gcp_secret": "other"},
    {"model.hf_token": ""}, {"gke": ""}, {"local": ""}, {"backend": "local"},
    {"backend": "gke"}, {"local.venv": "~"}, {"local.root": "/"}, {"train.args": ""},
    {"train.args.reward_functions_path": "/tmp/evil.py"}, {"model.hf_repo": "evil/model"},
    {"gke.bucket": "theirs"}, {"gke.iam_mode": "project-storage-admin"}, {"promotion": ""},
    {"promotion.min_delta": "-100"}, {"eval.files": "gs://theirs/x.parquet"}])
def test_the_review_s_attacks_are_refused_naming_the_field(name: str,
                                                          attack: dict[str, str]) -> None:
    with pytest.raises(ProfileError) as refused:
        _as_run(name, attack)
    (field,) = attack
    assert [i.field for i in refused.value.issues] == [field]
    assert FIXED in refused.value.issues[0].problem
    # the message says the run's parameter, not the profile file, is what cannot be used
    assert str(refused.value).startswith("the run's overrides parameter cannot be used")


def test_the_cli_and_the_environment_keep_every_field() -> None:
    evil = "docker.io/attacker/evil:1"
    assert load_profile("rehearsal", {"image.base": evil}, environ={}).image.base == evil
    # a deployment's own env (its job_variables.env) is its owner's
    assert load_profile("rehearsal", environ={"TPURL_IMAGE__BASE": evil}, origin="deployment",
                        deployed_env={"TPURL_IMAGE__BASE": evil}).image.base == evil
    # an in-process call of the flow (`tpurl run`, Python) is its owner's too
    assert load_profile("rehearsal", {"image.base": evil}, environ={},
                        origin="flow").image.base == evil


# inside the rehearsal's announcements.allowed_uri_prefixes, as a run's dataset must be
ANNOUNCED_V8 = f"file://{REPO_ROOT}/.tpurl/announced/v8.parquet"


def test_tunable_fields_change_what_the_run_uses() -> None:
    profile = _as_run("rehearsal", {
        "train.args.learning_rate": "5e-4", "train.args.rl.num_generations": "4",
        "model.hf_revision": "0123456789abcdef0123456789abcdef01234567",
        "data.train_files": ANNOUNCED_V8, "eval.batches": "3",
        "local.dataset_rows": "32"})
    assert profile.train.args["learning_rate"] == "5e-4"
    assert profile.train.args["rl.num_generations"] == "4"
    assert profile.model.hf_revision.startswith("0123")
    assert profile.data.train_files == ANNOUNCED_V8
    assert profile.eval is not None and profile.eval.batches == 3
    assert profile.local is not None and profile.local.dataset_rows == 32


def test_what_the_dispatcher_and_prefect_yaml_pass_stays_tunable() -> None:
    """The retrain runs' dataset_uri and model_revision become these two fields
    (flows/pipeline.py); triggers pass no overrides; a deployment's own overrides (the GKE
    retrain's eval.batches) are the deploying operator's, accepted as the deployment's with
    the same key and value (load_profile's ``deployed``), however they would be judged as a
    run's."""
    import yaml

    from flows.common.paths import REPO_ROOT
    from flows.config.loading import load_profile
    from tests.support.profiles import required_overrides

    assert {"data.train_files", "model.hf_revision"} <= set(tunable_fields())
    shipped = yaml.safe_load((REPO_ROOT / "prefect.yaml").read_text())
    for deployment in shipped["deployments"]:
        parameters = deployment.get("parameters") or {}
        if own := parameters.get("overrides"):
            name = parameters["profile"]
            required = required_overrides(name)
            load_profile(name, {**required, **own}, environ={}, origin="deployment",
                         deployed={**required, **own})
        for trigger in deployment.get("triggers") or []:
            assert "overrides" not in trigger.get("parameters", {}), trigger["name"]


def test_the_tunable_training_arguments_are_train_rl_s_own() -> None:
    assert all(unknown_key(key, "train_rl") is None for key in TUNABLE_TRAIN_ARGS)


def test_the_mark_is_read_from_the_schema() -> None:
    """The JSON schema carries it: a second list of fields could drift from the models."""
    schema = Profile.model_json_schema()
    marked = [name for name, prop in schema["$defs"]["EvalSection"]["properties"].items()
              if prop.get("run_tunable")]
    assert sorted(marked) == ["batch_size", "batches", "sampling"]
    assert refusal("eval.split", {"eval": {}}) is not None


# ---- hypothesis: no override dict changes a field that is not tunable ----

_PATHS = sorted(set(_schema_paths(Profile)) | {p for n in PROFILES for p in _field_paths(n)})


def _mangled(path: str) -> st.SearchStrategy[str]:
    return st.sampled_from([path, path.upper(), f"{path}.", f".{path}", path.replace(".", ".."),
                            f" {path}", f"{path}.x", path.replace(".", "__"), path + " "])


_KEYS = st.one_of(st.sampled_from(tunable_fields()), st.sampled_from(_PATHS),
                  st.sampled_from(_PATHS).flatmap(_mangled), st.text(max_size=12))
_VALUES = st.one_of(st.just(""), st.none(), st.text(max_size=12), st.integers(),
                    st.lists(st.text(max_size=4), max_size=2),
                    st.dictionaries(st.sampled_from(["base", "env", "x"]), st.text(max_size=4),
                                    max_size=2),
                    st.sampled_from(["docker.io/attacker/evil:1", "PREFECT_API_KEY", "~", "0",
                                     "local", "gke", "1e-4"]))


def _fixed_part(profile: Profile) -> dict[str, Any]:
    """The profile as dumped, with every tunable path taken out."""
    dumped = profile.model_dump(mode="json")
    for path in tunable_fields():
        head, _, rest = path.partition(".args.")
        parts = [*head.split("."), "args", rest] if rest else path.split(".")
        node = dumped
        for part in parts[:-1]:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(parts[-1], None)
    return dumped


@cache
def _baseline(name: str) -> dict[str, Any]:
    return _fixed_part(load_profile(name, environ=_environ(name)))


@pytest.mark.parametrize("name", PROFILES)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(overrides=st.dictionaries(_KEYS, _VALUES, max_size=4))
def test_no_override_dict_changes_a_field_that_is_not_tunable(
        name: str, overrides: dict[str, Any]) -> None:
    baseline = _baseline(name)
    try:
        profile = _as_run(name, overrides)
    except ProfileError as refused:
        named = {issue.field for issue in refused.issues}
        # a path no run may set is named as given (an unknown or mangled one too)
        assert all(key in named for key in overrides if key not in tunable_fields()), \
            str(refused)
        return
    assert _fixed_part(profile) == baseline
    assert all(key in tunable_fields() for key in overrides)


# ---- an error caused by a run's parameter says so, for every kind --------------------

ERROR_KINDS = {
    "type": ("rehearsal", {"eval.batches": "x"}, "deployment"),
    "range": ("rehearsal", {"eval.batches": "0"}, "deployment"),
    "choice": ("rehearsal", {"eval.sampling": "bogus"}, "deployment"),
    "argument": ("rehearsal", {"train.args.learning_rate": "abc"}, "deployment"),
    "across fields": ("rehearsal", {"train.args.max_prefill_predict_length": "500"},
                      "deployment"),
    "fixed": ("rehearsal", {"image.base": "docker.io/attacker/evil:1"}, "deployment"),
    "unknown": ("rehearsal", {"imag.base": "x"}, "deployment"),
    "section": ("qwen3-30b-a3b-v6e-32", {"gke": ""}, "deployment"),
    "missing": ("qwen3-30b-a3b-v6e-32", {"gke.project": ""}, "flow"),
    "not a field (in-process)": ("rehearsal", {"local.rooot": "/x"}, "flow"),
}


@pytest.mark.parametrize("kind", ERROR_KINDS)
def test_an_error_a_run_s_overrides_caused_names_that_parameter(kind: str) -> None:
    name, overrides, origin = ERROR_KINDS[kind]
    with pytest.raises(ProfileError) as refused:
        load_profile(name, overrides, environ=_environ(name), origin=origin,
                     deployed_env=_environ(name))
    message = str(refused.value)
    assert message.startswith("the run's overrides parameter cannot be used with profile")
    assert "is invalid" not in message
    for issue in refused.value.issues:
        assert "the run's overrides parameter)" in issue.problem, message


def test_the_announcement_s_parameters_are_named_as_themselves() -> None:
    """dataset_uri and model_revision become fields (flows/pipeline.py): their errors name
    those parameters, not overrides."""
    with pytest.raises(ProfileError) as refused:
        load_profile("rehearsal", {"data.dataset_name": "nope"}, environ={},
                     origin="deployment", parameters={"data.dataset_name": "dataset_uri"})
    message = str(refused.value)
    assert message.startswith("the run's dataset_uri parameter cannot be used with profile")
    (issue,) = refused.value.issues
    assert issue.problem.endswith("(set by the run's dataset_uri parameter)")


def test_a_broken_profile_file_is_still_the_profile_s_fault() -> None:
    """An override that is fine on a profile the environment breaks: the file (with its
    env) is invalid, not the run's parameter."""
    with pytest.raises(ProfileError) as refused:
        load_profile("qwen3-30b-a3b-v6e-32", {"train.args.learning_rate": "1e-5"},
                     environ={}, origin="deployment")
    assert str(refused.value).startswith("profile ") and "is invalid" in str(refused.value)
    assert all("the run's" not in i.problem for i in refused.value.issues)
