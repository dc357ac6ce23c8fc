"""A deployment's run that brings its own dataset or base-model revision passes an
announcement's rules in the profile loader (flows/config/unvouched_values.py), by every
route a run has: ``dataset_uri``/``model_revision``, ``overrides``, a ``TPURL_`` variable. The
profile file's and the deployment's own values are trusted; the owner's CLI and an
in-process call are not checked."""

from __future__ import annotations

import pytest

from flows.common.paths import REPO_ROOT
from flows.config import ProfileError, load_profile
from flows.config.unvouched_values import CATEGORY

COMMIT = "0123456789abcdef0123456789abcdef01234567"
INSIDE = f"file://{REPO_ROOT}/.tpurl/announced/v3.parquet"  # the rehearsal's allowed prefix
PARAMETERS = {"data.train_files": "dataset_uri", "model.hf_revision": "model_revision"}


def _run(overrides: dict[str, str], environ: dict[str, str] | None = None,
         deployed: dict[str, str] | None = None, parameters: dict[str, str] | None = None):
    return load_profile("rehearsal", overrides, environ=environ or {}, origin="deployment",
                        parameters=parameters, deployed=deployed)


@pytest.mark.parametrize(("field", "value", "problem"), [
    ("model.hf_revision", "refs/pr/7", "revision 'refs/pr/7' is not a commit"),
    ("model.hf_revision", "v2.0", "revision 'v2.0' is not a commit"),
    ("data.train_files", "/tmp/v3.parquet", "is under no prefix the profile rehearsal allows"),
    ("data.train_files", f"file://{REPO_ROOT}/.tpurl/announced-untrusted/v3.parquet",
     "is under no prefix"),
    ("data.train_files", f"file://{REPO_ROOT}/.tpurl/announced/../secret.parquet",
     "has a '..' segment"),
    ("data.train_files", "v3.parquet", "is a relative path"),
])
@pytest.mark.parametrize("route", ["parameter", "overrides"])
def test_a_run_s_own_value_is_held_to_the_announcement_rules(field, value, problem, route):
    parameters = {field: PARAMETERS[field]} if route == "parameter" else None
    with pytest.raises(ProfileError) as refused:
        _run({field: value}, parameters=parameters)
    (issue,) = refused.value.issues
    setter = PARAMETERS[field] if route == "parameter" else "overrides"
    assert issue.field == field and problem in issue.problem
    assert issue.problem.endswith(f"(set by the run's {setter} parameter)")
    assert issue.category == CATEGORY and issue.fix
    assert str(refused.value).startswith(f"the run's {setter} parameter cannot be used")


def test_a_run_s_environment_is_held_to_them_too():
    """A run may pass its own job variables, its environment among them: a TPURL_ variable
    is not vouched for by the deployment."""
    with pytest.raises(ProfileError) as refused:
        _run({}, environ={"TPURL_DATA__TRAIN_FILES": "gs://evil/v3.parquet"})
    (issue,) = refused.value.issues
    assert issue.field == "data.train_files" and "TPURL_DATA__TRAIN_FILES" in issue.problem


def test_values_inside_the_rules_and_those_the_file_or_deployment_gave_are_accepted():
    profile = _run({"data.train_files": INSIDE, "model.hf_revision": COMMIT})
    assert (profile.data.train_files, profile.model.hf_revision) == (INSIDE, COMMIT)
    assert _run({}).model.hf_revision == "main"  # the file's own (here its default)
    deployed = {"data.train_files": "/srv/fixed.parquet", "model.hf_revision": "v1.0"}
    profile = _run(dict(deployed), deployed=deployed)
    assert (profile.data.train_files, profile.model.hf_revision) == ("/srv/fixed.parquet",
                                                                     "v1.0")
    with pytest.raises(ProfileError):  # the same field with another value is the run's
        _run({"data.train_files": "/srv/other.parquet"}, deployed=deployed)


@pytest.mark.parametrize("origin", ["cli", "flow"])
def test_the_owner_s_cli_and_in_process_calls_are_not_checked(origin):
    profile = load_profile("rehearsal", {"data.train_files": "/tmp/v3.parquet",
                                         "model.hf_revision": "main"}, environ={},
                           origin=origin)
    assert profile.data.train_files == "/tmp/v3.parquet"
