"""The watch flow: `tpurl watch` as a deployment, on a schedule (prefect.yaml ships one per
profile, its schedule inactive until the team turns it on).

Bound as every deployed flow is (flows/deployed/run_choices.py): a run's job variables and
``profile`` only repeat the deployment's, so a workspace member cannot watch, and so roll
back, another team's champion through this deployment. It takes no other parameter: what
is watched, on which set and at which alpha is the profile's ``watch`` section, which a
run's overrides cannot reach. A refusal fails the run naming the field and the fix.
"""

from __future__ import annotations

from prefect import flow
from prefect.runtime import flow_run

from flows.backends import storage_for
from flows.config import load_profile
from flows.config.teams import load_teams
from flows.core.error_redaction import redacting_errors
from flows.core.team_origin import TeamAndOrigin
from flows.deployed.declared import deployment_declared
from flows.deployed.run_choices import refuse_run_choices
from flows.flow_runs.run_log import readable_failures
from flows.flow_runs.run_origin import run_origin
from flows.operations.watch import ProgramScorer, run_watch
from flows.runpage import quiet_artifacts
from flows.runpage.watch import watch_markdown


@flow(name="watch", validate_parameters=True, log_prints=True)  # the lines: the run log
@redacting_errors
def watch_flow(profile: str) -> list[str]:
    """Score PROFILE's champion again; post tpurl.model.regressed on a significant drop.
    Returns the verdict's lines.

    Args:
        profile: The profile whose champion is watched: a deployment's run repeats the
            deployment's own (parameters.profile in prefect.yaml).
    """
    readable_failures()
    origin = run_origin()
    declared = deployment_declared()
    refuse_run_choices(declared, {"profile": profile})
    cfg = load_profile(profile, origin=origin, deployed_env=declared.env,
                       deployed_profile=declared.profile)
    storage = storage_for(cfg.section.output_root())
    # the team and origin decided once, as a run's prepare does (decision 0034): the watch's
    # JobSet queues as the team's, at a deployment's priority when a schedule started it
    scorer = ProgramScorer(team_origin=TeamAndOrigin(load_teams().team_of(cfg.name), origin))
    outcome = run_watch(storage, cfg, scorer, flow_run=str(flow_run.id or ""))
    lines = outcome.lines()
    print("\n".join(lines))
    quiet_artifacts.create("markdown", watch_markdown(cfg.name, outcome.record, outcome.canary),
                           description=f"watch of {cfg.name}: {outcome.record.verdict}"
                           + (f", canary {outcome.canary.verdict}" if outcome.canary else ""))
    return lines
