"""What a deployment's run may choose, pure: its job variables and profile only repeat the
deployment's (flows/deployed/run_choices.py), and a TPURL_ profile field of the flow's
environment that the deployment's env does not set obeys the run-tunable rule
(flows/config/loading.py). The same rules on a real server and worker:
tests/test_run_choices_on_a_worker.py."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flows.config import ProfileError, load_profile
from flows.deployed.declared import Declared
from flows.deployed.run_choices import MUST_DECLARE, refused_choices

TEARDOWN = Declared({"profile": "qwen3-30b-a3b-v6e-32", "delete_bucket": False},
                    {"env": {"PREFECT_FLOWS_HEARTBEAT_FREQUENCY": "3600",
                             "TPURL_GKE__CLUSTER": ""}})


def _named(issues) -> list[str]:
    return [issue.field for issue in issues]


def test_a_run_repeating_its_deployment_is_refused_nothing() -> None:
    assert refused_choices({}, TEARDOWN, {"profile": "qwen3-30b-a3b-v6e-32"},
                           profile_fixed=True) == []
    assert refused_choices({"env": {"TPURL_GKE__CLUSTER": ""}}, TEARDOWN,
                           {"profile": "qwen3-30b-a3b-v6e-32"}, profile_fixed=True) == []


def test_each_variable_the_run_chose_is_named_never_its_value() -> None:
    issues = refused_choices({"env": {"TPURL_GKE__CLUSTER": "someone-elses",
                                      "HF_TOKEN": "hf_secretvalue"},
                              "command": "sh -c id", "working_dir": "/tmp"},
                             TEARDOWN, {"profile": "smoke-qwen3-0.6b-v6e-8"}, profile_fixed=True)
    assert _named(issues) == ["job_variables.command", "job_variables.env.HF_TOKEN",
                              "job_variables.env.TPURL_GKE__CLUSTER",
                              "job_variables.working_dir", "profile"]
    text = " ".join(f"{i.problem} {i.fix}" for i in issues)
    assert "someone-elses" not in text and "hf_secretvalue" not in text and "sh -c" not in text
    assert {i.category for i in issues} == {"config/fixed-by-deployment"}


def test_a_deployment_without_a_profile_runs_the_flows_default_or_the_events() -> None:
    bare = Declared({}, {})
    assert refused_choices({}, bare, {"profile": "rehearsal"}, profile_fixed=True,
                           default_profile="rehearsal") == []
    for default in ("rehearsal", None):  # teardown's profile has no default
        assert _named(refused_choices({}, bare, {"profile": "qwen3-30b-a3b-v6e-32"},
                                      profile_fixed=True, default_profile=default)) == ["profile"]
    # serving: the automation passes the promoted event's profile
    assert refused_choices({}, bare, {"profile": "qwen3-30b-a3b-v6e-32"},
                           profile_fixed=False) == []


def test_a_run_deletes_the_bucket_only_when_its_deployment_declares_it() -> None:
    asks = {"profile": "qwen3-30b-a3b-v6e-32", "delete_bucket": True}
    refused = refused_choices({}, TEARDOWN, asks, profile_fixed=True,
                              destructive=("delete_bucket",))
    assert _named(refused) == ["delete_bucket"]
    assert "--delete-bucket" in refused[0].fix and "parameters.delete_bucket" in refused[0].fix
    deleting = Declared({**TEARDOWN.parameters, "delete_bucket": True}, TEARDOWN.job_variables)
    assert refused_choices({}, deleting, asks, profile_fixed=True,
                           destructive=("delete_bucket",)) == []
    # keeping the bucket is always a run's to choose
    assert refused_choices({}, deleting, {**asks, "delete_bucket": False}, profile_fixed=True,
                           destructive=("delete_bucket",)) == []


@given(st.dictionaries(st.sampled_from(["PREFECT_FLOWS_HEARTBEAT_FREQUENCY",
                                        "TPURL_GKE__CLUSTER", "TPURL_GKE__BUCKET", "PYTHONPATH"]),
                       st.sampled_from(["", "3600", "x"]), max_size=4))
def test_an_env_entry_passes_exactly_when_the_deployment_declared_it_so(env) -> None:
    named = _named(refused_choices({"env": env}, TEARDOWN, {"profile": "qwen3-30b-a3b-v6e-32"},
                                   profile_fixed=True))
    declared = TEARDOWN.env
    assert named == sorted(f"job_variables.env.{k}" for k, v in env.items()
                           if declared.get(k, object()) != v)


def test_an_undeclared_tpurl_field_in_a_deployments_run_obeys_the_run_tunable_rule() -> None:
    environ = {"TPURL_IMAGE__BASE": "attacker/image:latest"}
    with pytest.raises(ProfileError) as err:
        load_profile("rehearsal", environ=environ, origin="deployment", deployed_env={})
    assert "image.base" in str(err.value) and "TPURL_IMAGE__BASE" in str(err.value)
    assert "attacker/image" not in str(err.value)
    # the deployment's own env, same name and value: the deployment's, not the run's
    load_profile("rehearsal", environ=environ, origin="deployment", deployed_env=environ)
    # a run-tunable field from the environment is a run's to change
    load_profile("rehearsal", environ={"TPURL_TRAIN__ARGS__LEARNING_RATE": "2e-6"},
                 origin="deployment", deployed_env={})
    # the owner's own call (CLI, `tpurl run`, Python) stays unrestricted
    load_profile("rehearsal", environ=environ, origin="flow")


def test_a_declared_name_with_another_value_is_the_runs() -> None:
    with pytest.raises(ProfileError) as err:
        load_profile("rehearsal", environ={"TPURL_MODEL__HF_TOKEN__SECRET_BLOCK": "theirs"},
                     origin="deployment",
                     deployed_env={"TPURL_MODEL__HF_TOKEN__SECRET_BLOCK": "ours"})
    assert "model.hf_token" in str(err.value) and "theirs" not in str(err.value)


ROLLBACK = Declared({"profile": "qwen3-30b-a3b-v6e-32"},
                    {"env": {"PREFECT_FLOWS_HEARTBEAT_FREQUENCY": "3600"}})


@pytest.mark.parametrize(("given", "refused"), [
    ({}, []),  # left out: the flow's default
    ({"to_run": ""}, []),  # the default repeated
    ({"to_run": "run-1"}, ["to_run"]),
    ({"to_run": " "}, ["to_run"]),
])
def test_a_fixed_parameter_is_the_deployments_or_the_flows_default(given, refused) -> None:
    """The rollback's ``to_run``: which model becomes the champion is the deployment's to
    declare; a run repeats that or the default, and the fix names the parameter to set."""
    issues = refused_choices({}, ROLLBACK, {"profile": "qwen3-30b-a3b-v6e-32", **given},
                             profile_fixed=True, fixed={"to_run": ""})
    assert _named(issues) == refused
    for issue in issues:
        assert "parameters.to_run in prefect.yaml" in issue.fix
        assert issue.category == "config/fixed-by-deployment"


def test_following_the_fixed_parameters_fix_lets_the_run_through() -> None:
    """The fix applied: the deployment declares ``to_run`` itself; a run repeating it passes,
    another value (the default included) is refused."""
    declaring = Declared({**ROLLBACK.parameters, "to_run": "run-1"}, ROLLBACK.job_variables)
    asks = {"profile": "qwen3-30b-a3b-v6e-32", "to_run": "run-1"}
    assert refused_choices({}, declaring, asks, profile_fixed=True, fixed={"to_run": ""}) == []
    assert _named(refused_choices({}, declaring, {**asks, "to_run": ""}, profile_fixed=True,
                                  fixed={"to_run": ""})) == ["to_run"]


def test_a_dispatcher_run_targets_only_the_deployment_its_deployment_declares() -> None:
    """The dispatcher's ``deployment``: equal passes; another, or a dispatcher deployment
    that declares none, is refused naming the field and where the deployment sets it."""
    declared = Declared({"deployment": "rl-post-training/team-a"})

    def issues(given: Declared, run: dict) -> list:
        return refused_choices({}, given, run, profile_fixed=False, fixed={"deployment": MUST_DECLARE})

    assert issues(declared, {"deployment": "rl-post-training/team-a"}) == []
    for run in ({"deployment": "rl-post-training/team-b"}, {"deployment": None}, {}):
        [issue] = issues(declared, run)
        assert issue.field == "deployment" and "'rl-post-training/team-a'" in issue.problem
        assert "parameters.deployment in prefect.yaml" in issue.fix
    [undeclared] = issues(Declared({}), {"deployment": "rl-post-training/team-a"})
    assert "declares none" in undeclared.problem


# A Kubernetes-pool deployment: one job variable per environment variable name
# (deployments/work-pool/kubernetes-base-job-template.json has no `env`).
WEEKLY = Declared({"profile": "qwen3-30b-a3b-v6e-32"},
                  {"PREFECT_FLOWS_HEARTBEAT_FREQUENCY": "3600", "TPURL_GKE__CLUSTER": ""})


def test_a_kubernetes_deployments_variables_are_its_env() -> None:
    assert WEEKLY.env == {"PREFECT_FLOWS_HEARTBEAT_FREQUENCY": "3600", "TPURL_GKE__CLUSTER": ""}
    assert Declared({}, {"stream_output": True, "env": {"A": "1"}}).env == {"A": "1"}


def test_a_kubernetes_run_choosing_a_value_or_an_env_is_named() -> None:
    """A run's own value of a listed name, and an ``env`` (not rendered on that pool, and
    refused all the same: the run chose it), each named; the deployment's value passes."""
    assert refused_choices({"TPURL_GKE__CLUSTER": ""}, WEEKLY,
                           {"profile": "qwen3-30b-a3b-v6e-32"}, profile_fixed=True) == []
    issues = refused_choices({"TPURL_GKE__CLUSTER": "someone-elses",
                              "env": {"TPURL_GKE__CLUSTER": ""},
                              "env.PYTHONPATH": "/tmp/attacker"},
                             WEEKLY, {"profile": "qwen3-30b-a3b-v6e-32"}, profile_fixed=True)
    assert _named(issues) == ["job_variables.TPURL_GKE__CLUSTER",
                              "job_variables.env.TPURL_GKE__CLUSTER",
                              "job_variables.env.PYTHONPATH"]


def _rendered(issues) -> list[tuple[str, str, str]]:
    return [(issue.render(), issue.fix, issue.category) for issue in issues]


def test_every_refusal_says_what_was_chosen_and_how_to_run_instead() -> None:
    """The whole text a refused run prints, one case per kind of refusal: what the user reads
    is the product's advice, so a changed word is a changed product."""
    declared = Declared({"profile": "team-a", "to_run": "r1"},
                        {"env": {"A": "1"}, "image": "img:1"})
    issues = refused_choices({"env": {"A": "2", "B": "3"}, "image": "img:2", "cpu": 4},
                             declared, {"profile": "team-b", "to_run": "r0",
                                        "delete_bucket": True},
                             profile_fixed=True, destructive=("delete_bucket",),
                             fixed={"to_run": None, "deployment": MUST_DECLARE})
    variable_fix = ("leave it out of the run's job variables; a deployment's owner sets it in "
                    "the deployment (job_variables in prefect.yaml) and deploys again")
    category = "config/fixed-by-deployment"
    assert _rendered(issues) == [
        ("job_variables.cpu: is not declared by the deployment: a run may not choose what "
         f"runs on the worker\n    fix: {variable_fix}", variable_fix, category),
        ("job_variables.env.A: differs from the deployment's value: a run may not choose what "
         f"runs on the worker\n    fix: {variable_fix}", variable_fix, category),
        ("job_variables.env.B: is not declared by the deployment: a run may not choose what "
         f"runs on the worker\n    fix: {variable_fix}", variable_fix, category),
        ("job_variables.image: differs from the deployment's value: a run may not choose what "
         f"runs on the worker\n    fix: {variable_fix}", variable_fix, category),
        *[(f"{field}: {problem}\n    fix: {fix}", fix, category) for field, problem, fix in (
            ("profile", "is the deployment's: a run may not choose another profile than "
             "'team-a'", "run the deployment of that profile, or deploy one for it "
             "(parameters.profile in prefect.yaml); `tpurl run PROFILE` runs any profile from a "
             "checkout"),
            ("delete_bucket", "deletes what the deployment does not declare deleted: a run may "
             "set it only when the deployment does", "run `tpurl teardown PROFILE "
             "--delete-bucket` from a workstation, or deploy a teardown whose parameters "
             "declare it (parameters.delete_bucket: true in prefect.yaml)"),
            ("deployment", "is the deployment's, which declares none: a run may not choose "
             "one", "leave it out of the run's parameters, or run the deployment declared for "
             "that value; the deployment's owner sets it (parameters.deployment in "
             "prefect.yaml) and deploys again"),
            ("to_run", "is the deployment's: a run may not choose another value than 'r1'",
             "leave it out of the run's parameters, or run the deployment declared for that "
             "value; the deployment's owner sets it (parameters.to_run in prefect.yaml) and "
             "deploys again"))]]


@pytest.mark.parametrize(("default", "says"), [
    ("rehearsal", "runs the flow's default 'rehearsal'"), (None, "has none")])
def test_a_deployment_without_a_profile_says_what_it_runs(default, says) -> None:
    [issue] = refused_choices({}, Declared({}, {}), {"profile": "other"}, profile_fixed=True,
                              default_profile=default)
    fix = "give the deployment a profile (parameters.profile in prefect.yaml) and deploy again"
    assert (issue.render(), issue.category) == (
        f"profile: is the deployment's, which declares none and so {says}: a run may not "
        f"choose another\n    fix: {fix}", "config/fixed-by-deployment")


def test_only_the_env_variable_is_compared_key_by_key() -> None:
    """A mapping-valued variable other than ``env`` (labels, say) is the deployment's as a
    whole; an ``env`` that is not a mapping is a value like any other."""
    declared = Declared({"profile": "p"}, {"labels": {"team": "a"}, "env": {"A": "1"}})
    assert refused_choices({"labels": {"team": "a"}}, declared, {"profile": "p"},
                           profile_fixed=True) == []
    assert _named(refused_choices({"labels": {"team": "b"}}, declared, {"profile": "p"},
                                  profile_fixed=True)) == ["job_variables.labels"]
    assert _named(refused_choices({"env": "A=2"}, declared, {"profile": "p"},
                                  profile_fixed=True)) == ["job_variables.env"]


def test_an_undeclared_target_does_not_hide_the_next_fixed_parameter() -> None:
    issues = refused_choices({}, Declared({"profile": "p"}, {}),
                             {"profile": "p", "to_run": "r0"}, profile_fixed=True,
                             fixed={"deployment": MUST_DECLARE, "to_run": None})
    assert _named(issues) == ["deployment", "to_run"]
    assert repr(MUST_DECLARE) == "MUST_DECLARE"
