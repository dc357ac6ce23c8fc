"""The rollback flow: `tpurl rollback` as a deployment, for the automation that runs it when
a regression of the champion is announced (``tpurl.model.regressed``, prefect.yaml).

It takes the same path as the command (flows/operations/rollback.py ``plan_rollback`` then
``carry_out``), bound as every deployed flow is: a run's job variables and ``profile`` only
repeat the deployment's, and which model becomes the champion (``to_run``) is the
deployment's too (flows/deployed/run_choices.py). Several teams share one workspace, so a
member who may create runs could otherwise roll back another team's champion, or walk one
back further than the regression calls for.

The announcement is held to its contract (the events reference, ``tpurl.model.regressed``):
its resource (``event_resource``: the event's id and ``tpurl.profile`` label, which the
trigger passes) is the deployment's own profile's model, and its ``run`` (``regressed_run``)
is that profile's champion now, so an announcement naming no run, another profile's model,
or a champion since replaced changes nothing. Who rolled back is the flow run's creator as
Prefect recorded it (flows/flow_runs/run_creator.py), never a parameter the creator types.
A refusal fails the run with the message naming the field and the fix; nothing was changed
then. Once rolled back, where the profile's ``watch.retrain`` names a retrain deployment,
the newest dataset announced to it is announced again (flows/operations/watch_retrain.py),
so a retrain is queued through its dispatcher and judged against the restored champion.
"""

from __future__ import annotations

from prefect import flow
from prefect.runtime import flow_run

from flows.backends import storage_for
from flows.config import load_profile
from flows.config.profile import Profile
from flows.core.error_redaction import redacting_errors
from flows.core.rollback import resource_problem
from flows.deployed.declared import deployment_declared
from flows.deployed.run_choices import refuse_run_choices
from flows.flow_runs.run_creator import run_creator
from flows.flow_runs.run_log import readable_failures
from flows.flow_runs.run_origin import run_origin
from flows.operations.rollback import carry_out, plan_rollback


@flow(name="rollback", validate_parameters=True, log_prints=True)  # the lines: the run log
@redacting_errors
def rollback_flow(profile: str, reason: str, regressed_run: str,
                  event_resource: dict[str, str] | None = None,
                  to_run: str = "") -> list[str]:
    """Make the model promoted before the regressed champion of PROFILE the champion again.
    Returns what changed.

    Args:
        profile: The profile whose champion regressed: a deployment's run repeats the
            deployment's own (parameters.profile in prefect.yaml).
        reason: Why, kept in the history and sent in the rolled-back event.
        regressed_run: The run whose model regressed (the event's payload run): it must be
            the champion now; empty is refused.
        event_resource: The regression event's resource, its prefect.resource.id and
            tpurl.profile label: both must name this profile's model (tpurl.model.PROFILE).
        to_run: The promoted run to restore instead of the one before the champion: a
            deployment's run may give only the deployment's own value (none, in
            prefect.yaml); `tpurl rollback PROFILE --to RUN` chooses from a workstation.
    """
    readable_failures()  # the run page's log: a refusal once, without traceback
    origin = run_origin()
    declared = deployment_declared()
    refuse_run_choices(declared, {"profile": profile, "to_run": to_run},
                       fixed={"to_run": ""})
    cfg = load_profile(profile, origin=origin, deployed_env=declared.env,
                       deployed_profile=declared.profile)
    resource_problem(cfg.name, event_resource)
    creator = run_creator(flow_run.id)
    storage = storage_for(cfg.section.output_root())
    plan = plan_rollback(storage, cfg, to_run or None, reason, creator.by,
                         regressed_run=regressed_run, verified=creator.verified)
    posted = carry_out(storage, cfg, plan)
    lines = plan.lines()
    if not posted:
        lines.append("no Prefect API was set: the event was not sent")
    elif queued := _retrain(cfg):
        lines.append(queued)
    print("\n".join(["rolled back:", *lines]))
    return lines


def _retrain(cfg: Profile) -> str:
    """A regression's rollback done: the profile's watch.retrain, when it names a deployment
    (flows/operations/watch_retrain.py)."""
    from prefect.client.orchestration import get_client

    from flows.operations.watch_retrain import announce_retrain

    if cfg.watch is None or not cfg.watch.retrain:
        return ""
    with get_client(sync_client=True) as client:
        return announce_retrain(client, cfg)
