"""A deployment's run chooses nothing that runs on the worker: its job variables and its
``profile`` repeat what the deployment declared, or the run is refused before anything runs.

Whoever can create a flow run through the Prefect API (a workspace member allowed only to run
deployments, or anyone reaching an open server) sets its ``job_variables`` and parameters.
Prefect refuses, at creation, a variable the pool's template does not list and an ``env``
name outside the template's list (prefect/server/api/validation.py
``validate_job_variables_for_deployment_flow_run``, prefect 3.9.1; the shipped templates are
in deployments/work-pool/). It cannot tell a run's values from the deployment's: the worker
lays the run's variables over the deployment's (prefect/workers/base.py
``_get_configuration``: the run's ``env`` keys over the deployment's, any other variable
replaced). So a run could still give a listed variable its own value (``TPURL_GKE__CLUSTER``
of the teardown; on the process pool ``stream_output``; the Kubernetes pool offers ``env``
alone) and switch a deployment to another profile. This
module compares the run's own choices (``prefect.runtime.flow_run.job_variables``: the run's,
not merged; its parameters) with the deployment's, read through the API
(declared.py), and refuses any difference, naming the variable, never
its value (it may be a token). The worker's own environment, inherited by the flow's
process, belongs to whoever started the worker and is not the run's to choose.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prefect.runtime import deployment, flow_run

from flows.common.failure_codes import Failure
from flows.common.issues import Issue
from flows.config.errors import ProfileError
from flows.deployed.declared import Declared

CATEGORY = Failure.CONFIG_FIXED_BY_DEPLOYMENT
VARIABLE_FIX = ("leave it out of the run's job variables; a deployment's owner sets it in "
                "the deployment (job_variables in prefect.yaml) and deploys again")
PROFILE_FIX = ("run the deployment of that profile, or deploy one for it (parameters.profile "
               "in prefect.yaml); `tpurl run PROFILE` runs any profile from a checkout")
NO_PROFILE_FIX = "give the deployment a profile (parameters.profile in prefect.yaml) and deploy again"
DESTRUCTIVE_FIX = ("run `tpurl teardown PROFILE --delete-bucket` from a workstation, or deploy "
                   "a teardown whose parameters declare it (parameters.{name}: true in "
                   "prefect.yaml)")
FIXED_FIX = ("leave it out of the run's parameters, or run the deployment declared for that "
             "value; the deployment's owner sets it (parameters.{name} in prefect.yaml) and "
             "deploys again")


class _MustDeclare:
    """The default of a fixed parameter that has none: the deployment must declare it."""

    def __repr__(self) -> str:
        return "MUST_DECLARE"


# a fixed parameter naming what the deployment acts on (the dispatcher's target): without a
# value the deployment declares, its runs are bound to nothing, so each is refused
MUST_DECLARE: Any = _MustDeclare()


def refused_choices(run_job_variables: Mapping[str, Any], declared: Declared,
                    run_parameters: Mapping[str, Any], *, profile_fixed: bool,
                    default_profile: str | None = None,
                    destructive: tuple[str, ...] = (),
                    fixed: Mapping[str, Any] | None = None) -> list[Issue]:
    """One issue per job variable the run sets to anything but the deployment's value, and
    for a ``profile`` other than the deployment's. ``profile_fixed``: the flow's profile is
    the deployment's (the pipeline, teardown): the one it declares, else the flow's
    ``default_profile`` (a deployment that declares none runs that); False where a run's
    profile comes from an event (serving), so only a declared one binds. ``destructive``:
    flag parameters that delete what the deployment's owner keeps (the teardown's
    ``delete_bucket``); a run may set one only when the deployment declares it true.
    ``fixed``: parameters a run may not choose at all, each with what applies when the
    deployment declares none: the flow's default (the rollback's ``to_run``: which earlier
    model becomes the champion is the deployment's decision), or ``MUST_DECLARE`` for one
    that names what the deployment acts on (the dispatcher's target ``deployment``), so a
    deployment declaring none binds its runs to nothing and each is refused. A run's value
    must be the one the deployment declares, else that default. Pure."""
    issues: list[Issue] = []
    given_env = declared.job_variables.get("env")
    declared_env = dict(given_env) if isinstance(given_env, dict) else {}
    for name, value in sorted(run_job_variables.items()):
        if name == "env" and isinstance(value, Mapping):
            issues += [_variable(f"job_variables.env.{key}", key in declared_env)
                       for key, given in sorted(value.items())
                       if key not in declared_env or declared_env[key] != given]
        elif name not in declared.job_variables or declared.job_variables[name] != value:
            issues.append(_variable(f"job_variables.{name}", name in declared.job_variables))
    if "profile" in declared.parameters:
        if run_parameters.get("profile") != declared.parameters["profile"]:
            issues.append(Issue("profile", "is the deployment's: a run may not choose another "
                                f"profile than {declared.parameters['profile']!r}",
                                PROFILE_FIX, CATEGORY))
    elif profile_fixed and (default_profile is None
                            or run_parameters.get("profile") != default_profile):
        runs = f"runs the flow's default {default_profile!r}" if default_profile else \
            "has none"
        issues.append(Issue("profile", f"is the deployment's, which declares none and so "
                            f"{runs}: a run may not choose another", NO_PROFILE_FIX, CATEGORY))
    issues += [Issue(name, "deletes what the deployment does not declare deleted: a run may "
                     "set it only when the deployment does", DESTRUCTIVE_FIX.format(name=name),
                     CATEGORY)
               for name in destructive
               if run_parameters.get(name) and declared.parameters.get(name) is not True]
    for name, default in sorted((fixed or {}).items()):
        undeclared = name not in declared.parameters
        if undeclared and default is MUST_DECLARE:
            issues.append(Issue(name, "is the deployment's, which declares none: a run may not "
                                "choose one", FIXED_FIX.format(name=name), CATEGORY))
            continue
        want = declared.parameters.get(name, default)
        given = run_parameters.get(name, None if default is MUST_DECLARE else default)
        if given != want:
            issues.append(Issue(name, f"is the deployment's: a run may not choose another value "
                                f"than {want!r}", FIXED_FIX.format(name=name), CATEGORY))
    return issues


def _variable(name: str, declared: bool) -> Issue:
    what = ("differs from the deployment's value" if declared
            else "is not declared by the deployment")
    return Issue(name, f"{what}: a run may not choose what runs on the worker", VARIABLE_FIX,
                 CATEGORY)


def refuse_run_choices(declared: Declared, parameters: Mapping[str, Any], *,
                       profile_fixed: bool = True, default_profile: str | None = None,
                       destructive: tuple[str, ...] = (),
                       fixed: Mapping[str, Any] | None = None) -> None:
    """Raise, naming each variable, when this deployment's run chose its own job variables
    or profile. Called first in each flow, before any side effect; nothing to check in an
    in-process call (no deployment: the caller owns the profile)."""
    if not deployment.id:
        return
    if issues := refused_choices(dict(flow_run.job_variables or {}), declared, parameters,
                                 profile_fixed=profile_fixed,
                                 default_profile=default_profile,
                                 destructive=destructive, fixed=fixed):
        raise ProfileError(str(parameters.get("profile", "")), issues,
                           header=f"this run of deployment {deployment.name!r} chose what "
                           "only the deployment may")
