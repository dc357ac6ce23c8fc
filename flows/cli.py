"""`tpurl`: validate, plan and run a profile from the command line.

PROFILE is a name under deployments/profiles/ or a path to a YAML file; ``--set a.b=v``
overrides a field (also ``TPURL_A__B=v`` in the environment). Exit codes: 0 ok, 2 invalid
profile, 1 the run failed.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flows.backends import backend_for
from flows.config import Profile, ProfileError, load_profile, profile_names
from flows.config.loading import parse_override
from flows.flow_runs.heartbeat import quiet_heartbeats

if TYPE_CHECKING:
    from flows.core.backend import Backend
    from flows.run.result import PipelineResult

# What each subcommand's parser names as its `func` (argparse's set_defaults): main calls it
# with the parsed arguments and returns its exit code.
type Command = Callable[[argparse.Namespace], int]
# A command on a loaded profile (`_with_profile` loads and checks it first)
type ProfileCommand = Callable[[argparse.Namespace, _Loaded], int]


def _on_profile(command: ProfileCommand, local_checks: bool = False) -> Command:
    return functools.partial(_with_profile, command, local_checks)


def _version() -> str:
    """The installed project's version (pyproject.toml's, as the install recorded it)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tpu-rl-pipeline")
    except PackageNotFoundError:  # run from a tree that was never installed
        return "unknown (not installed: bash scripts/setup.sh)"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tpurl", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}",
                        help="print tpurl's version (CHANGELOG.md says what each changed)")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, text in (("validate", "check a profile; touches nothing"),
                       ("plan", "print stages, workload commands, URIs and chip-hours"),
                       ("run", "run the pipeline flow: on the Prefect API PREFECT_API_URL names "
                               "when set, else on a private API server of its own (or the "
                               "one `tpurl api-server start` keeps), or on none when every "
                               "stage's output is already there")):
        cmd = sub.add_parser(name, help=text, description=text)
        cmd.set_defaults(func=_on_profile(
            {"validate": _validate, "plan": _plan, "run": _run_command}[name], local_checks=True))
        _profile_arguments(cmd)
        if name == "plan":
            cmd.add_argument("--out", type=Path, help="also write the plan as files here")
            cmd.add_argument("--check", action="store_true",
                             help="also run the pre-flight checks against the cloud (read-only)")
            cmd.add_argument("--json", action="store_true", help="print the plan as JSON")
            cmd.add_argument("--import-recipe", action="store_true",
                             help="import the recipe's Python files in the sandbox, as "
                                  "validate does (without it they are only read)")
            cmd.add_argument("--compare-capacity", action="store_true",
                             help="also compare the capacity modes' TPU chip-hours and dollars "
                                  "(GKE profiles)")
            cmd.add_argument("--compare-tpu", action="store_true",
                             help="also compare the TPU generations (v6e, v5p, tpu7x) that fit "
                                  "the model: chips, $/hour per capacity mode, estimated "
                                  "training time and $ per run (GKE profiles)")
        if name == "run":
            cmd.add_argument("--json", action="store_true", help="print the result as JSON")
    down = _described(sub, "teardown", "destroy the profile's cluster (the bucket is kept "
                      "unless --delete-bucket and --confirm-bucket NAME)")
    down.set_defaults(func=_teardown_command)
    _profile_arguments(down)
    down.add_argument("--delete-bucket", action="store_true", help="also delete the bucket")
    down.add_argument("--confirm-bucket", metavar="NAME", help="the bucket's name, typed again")
    down.add_argument("--yes", action="store_true",
                      help="do not ask (scripts); without it a terminal is asked to confirm")
    _add_profile_command(sub, "result-storage", _result_storage, "create the GcsBucket block "
                         "that keeps Prefect's flow results in the profile's bucket")
    _add_profile_command(sub, "status", _status, "what exists now for the profile and what it costs "
                         "per hour (read-only); exit 1 if a static TPU pool exists where none "
                         "should")
    bundle = _add_profile_command(sub, "support-bundle", _support_bundle, "write one archive with what a "
                                  "failed run needs for a report (read-only, secrets redacted)")
    bundle.add_argument("--run", help="only this run's objects and logs (the tpurl/run label "
                        "a failure names)")
    bundle.add_argument("--out", type=Path, help="the archive's path (.tar.gz)")
    ident = _add_profile_command(sub, "flow-identity", _flow_identity, "print the commands "
                                 "that create the Google identities: infra (deploys the "
                                 "cluster, grants IAM; an operator's, once) and runtime (the "
                                 "flow pods of the profile's team, its own pool's); pipe to sh")
    ident.add_argument("--identity", choices=("both", "runtime", "infra"), default="both",
                       help="which identity to create (default both)")
    text = ("what this machine has for the profiles, and what is missing with its fix: "
            "Python, the cloud libraries, the Prefect API and its work pools, and per profile "
            "its programs, credentials, secrets and integrations (read-only); exit 1 if "
            "anything is missing, 2 if a profile cannot be read")
    check = sub.add_parser("check", help=text, description=text)
    check.add_argument("profile", nargs="*", help="profiles to check (none: the machine and "
                       "the Prefect API only)")
    check.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                       help="override a field of every profile checked")
    check.add_argument("--import-recipe", action="store_true",
                       help="import each profile's recipe files in the sandbox, as validate "
                            "does (without it they are only read)")
    check.set_defaults(func=_check)
    costs = _described(sub, "costs", "a team's TPU spend this month from its spend ledger, by "
                       "profile, stage and capacity mode, with dollars per promoted model and "
                       "per evaluation (read-only)")
    costs.set_defaults(func=_costs)
    costs.add_argument("target", nargs="?", metavar="TEAM|PROFILE", help="a team of the "
                       "teams file (deployments/teams.yaml), or a profile of one (none: "
                       "every team)")
    costs.add_argument("--month", metavar="YYYY-MM", help="the calendar month, UTC (default: "
                       "this one)")
    costs.add_argument("--json", action="store_true", help="print the month as JSON")
    watch = _described(sub, "watch", "score the champion again with the evaluation program "
                       "that promoted it and print the verdict; on a significant drop, post "
                       "tpurl.model.regressed (exit 3: regressed, 2: refused)")
    watch.set_defaults(func=_watch)
    _profile_arguments(watch)
    back = _described(sub, "rollback", "make an earlier promoted model the champion again: "
                      "the pointer, the MLflow alias champion, a rollback entry appended to "
                      "the promotion history and a tpurl.model.rolled-back event; every check "
                      "before any change (exit 2: refused, nothing changed)")
    back.set_defaults(func=_rollback)
    _profile_arguments(back)
    back.add_argument("--to", metavar="RUN", help="the promoted run to restore (default: the "
                      "one promoted before the current champion)")
    _decision_arguments(back, "why, in a few words", "who rolls back")
    prom = _described(sub, "promote", "promote a run whose promotion the training sentinel "
                      "held: its entry appended to the promotion history with who cleared it "
                      "and why, the pointer moved, a tpurl.model.promoted event; every check "
                      "before any change (exit 2: refused, nothing changed)")
    prom.set_defaults(func=_promote)
    _profile_arguments(prom)
    prom.add_argument("--clear", required=True, metavar="RUN", help="the held run to promote "
                      "(`tpurl status PROFILE` lists the held runs)")
    _decision_arguments(prom, "why the findings do not stop it, in a few words", "who clears")
    listing = _described(sub, "profiles", "list the shipped profiles")
    listing.set_defaults(func=_profiles)
    listing.add_argument("--tunable", action="store_true", help="list instead the fields a "
                         "deployment's run may change through its overrides parameter")
    text = ("a Prefect API server kept between commands, only yours to use (start: kept "
            "TPURL_KEEP_API_S seconds after its last use, default 900; without it each "
            "command starts its own, or none when nothing will run)")
    kept = sub.add_parser("api-server", help=text, description=text)
    kept.set_defaults(func=_api_server)
    kept.add_argument("action", choices=["start", "status", "stop"],
                      help="start one (or say which answers), say which are kept, stop them")
    post = _described(sub, "announce", "announce a dataset version or base-model revision to "
                      "a profile's retrain deployment (POST /api/events)")
    post.set_defaults(func=_announce)
    post.add_argument("profile", help="the profile whose retrain deployment trains it (the "
                      "event's tpurl.profile label)")
    what = post.add_mutually_exclusive_group(required=True)
    what.add_argument("--dataset", help="the dataset's URI or path (a parquet file)")
    what.add_argument("--revision", help="the base model's 40-hex commit on the hub")
    ann = _described(sub, "announcements", "what a retrain deployment still owes (due), and "
                     "dropping a due announcement (the only way one is given up)")
    ann.set_defaults(func=_announcements)
    verbs = ann.add_subparsers(dest="verb", required=True, metavar="{due,drop}")
    for verb, text in (("due", "list the announcements whose run ended without training "
                               "them; the next queued run trains them"),
                       ("drop", "never train this due announcement (tags the runs that ended "
                                "holding it tpurl-dropped:<event id>)")):
        cmd = verbs.add_parser(verb, help=text, description=text)
        cmd.add_argument("deployment", help="the retrain deployment, e.g. "
                         "rl-post-training/retrain-rehearsal")
        if verb == "drop":
            cmd.add_argument("event_id", help="the announcement's event id (`due` lists it)")
    return parser


def _described(sub: Any, name: str, text: str) -> argparse.ArgumentParser:
    """A subcommand whose one text is both its line in `tpurl --help` and its own `--help`
    description (and the CLI reference's)."""
    return sub.add_parser(name, help=text, description=text)


def _profile_arguments(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument("profile", help=f"one of {', '.join(profile_names())}, or a path")
    cmd.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                     help="override a profile field, e.g. --set gke.project=my-proj")


def _decision_arguments(cmd: argparse.ArgumentParser, why: str, who: str) -> None:
    """The flags of a change a person decides (rollback, promote): why, who, a dry run."""
    cmd.add_argument("--reason", required=True, help=f"{why} (kept in the history, sent in "
                     "the event)")
    cmd.add_argument("--by", help=f"{who}, recorded as given and said to be unchecked "
                     "(default: the OS account that runs the command)")
    cmd.add_argument("--dry-run", action="store_true", help="print what would change; "
                     "change nothing")


def _add_profile_command(sub: Any, name: str, command: ProfileCommand,
                         text: str) -> argparse.ArgumentParser:
    cmd = _described(sub, name, text)
    cmd.set_defaults(func=_on_profile(command))
    _profile_arguments(cmd)
    return cmd


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    command: Command = args.func
    return command(args)


def _check(args: argparse.Namespace) -> int:
    from flows.operations.check import check_command

    return check_command(args.profile, args.set, import_recipe=args.import_recipe)


def _costs(args: argparse.Namespace) -> int:
    from flows.operations.costs import costs_command

    return costs_command(args.target, args.month, args.json)


def _with_overrides(args: argparse.Namespace, command: Callable[[dict[str, str]], int]) -> int:
    """``command`` given the run's ``--set`` overrides; a malformed one: exit 2, as a profile
    that does not load."""
    try:
        overrides = dict(parse_override(item) for item in args.set)
    except ProfileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return command(overrides)


def _watch(args: argparse.Namespace) -> int:
    from flows.operations.watch import watch_command

    return _with_overrides(args, lambda overrides: watch_command(args.profile, overrides))


def _rollback(args: argparse.Namespace) -> int:
    from flows.operations.rollback import rollback_command

    return _with_overrides(args, lambda overrides: rollback_command(
        args.profile, overrides, args.to, args.reason, args.by, args.dry_run))


def _promote(args: argparse.Namespace) -> int:
    from flows.operations.promote import clear_command

    return _with_overrides(args, lambda overrides: clear_command(
        args.profile, overrides, args.clear, args.reason, args.by, args.dry_run))


def _profiles(args: argparse.Namespace) -> int:
    from flows.config.run_overrides import tunable_fields

    print("\n".join(tunable_fields() if args.tunable else profile_names()))
    return 0


def _api_server(args: argparse.Namespace) -> int:
    from flows.console.kept_api import (
        KeptApiError,
        KeptServerBusy,
        start_command,
        status_lines,
        stop_all,
    )

    if args.action == "start":
        try:
            print("\n".join(start_command(os.environ)))
        except (KeptApiError, KeptServerBusy) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        return 0
    print("\n".join(status_lines() if args.action == "status" else stop_all()))
    return 0


def _announce(args: argparse.Namespace) -> int:
    from flows.announcements.announce import announce_command

    try:
        return announce_command(args.profile, args.dataset, args.revision)
    except ProfileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _announcements(args: argparse.Namespace) -> int:
    from flows.announcements.ledger import drop_command, due_command

    if args.verb == "drop":
        return drop_command(args.deployment, args.event_id)
    return due_command(args.deployment)


@dataclass(frozen=True)
class _Loaded:
    """What a profile command works on: the profile with its ``--set`` overrides applied,
    and its backend (whose validation warnings were printed)."""

    profile: Profile
    overrides: dict[str, str]
    backend: Backend


def _with_profile(command: ProfileCommand, local_checks: bool, args: argparse.Namespace) -> int:
    """Load the profile (a bad one: exit 2), print its backend's warnings, refuse it when
    ``local_checks`` find a problem on this machine (validate, plan, run), then run
    ``command``."""
    try:
        overrides = dict(parse_override(item) for item in args.set)
        profile = load_profile(args.profile, overrides)
        # a GKE profile without the cloud libraries: EnvironmentNotReady, a ProfileError
        backend = backend_for(profile)
    except ProfileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for warning in backend.validation_warnings():
        print(warning, file=sys.stderr)
    if local_checks and (problems := _local_problems(profile, _recipe_unimported(args))):
        listed = "".join(f"\n  - {p}" for p in problems)
        print(f"error: profile {args.profile!r} is invalid ({len(problems)} problem(s)):"
              f"{listed}", file=sys.stderr)
        return 2
    return command(args, _Loaded(profile, overrides, backend))


def _validate(args: argparse.Namespace, loaded: _Loaded) -> int:
    print(f"profile {loaded.profile.name} is valid (backend {loaded.profile.backend})")
    return 0


def _result_storage(args: argparse.Namespace, loaded: _Loaded) -> int:
    from flows.run.result import ensure_gcs_result_storage

    slug = ensure_gcs_result_storage(loaded.profile)
    print(f"created {slug}; set PREFECT_RESULTS_DEFAULT_STORAGE_BLOCK={slug} on the work pool")
    return 0


def _status(args: argparse.Namespace, loaded: _Loaded) -> int:
    from flows.operations.status import status_command

    return status_command(loaded.profile)


def _support_bundle(args: argparse.Namespace, loaded: _Loaded) -> int:
    from flows.config.loading import resolve_profile_path
    from flows.operations.support_bundle import bundle_command

    raw = resolve_profile_path(args.profile).read_text()
    return bundle_command(loaded.profile, args.run, args.out, raw)


def _flow_identity(args: argparse.Namespace, loaded: _Loaded) -> int:
    if loaded.profile.gke is None:
        print("error: flow-identity needs a GKE profile", file=sys.stderr)
        return 2
    from flows.backends.gke.identity_setup import setup_commands
    from flows.config.teams import load_teams

    team = load_teams().team_of(loaded.profile.name)  # whose flow pods: the team's own
    print("\n".join(setup_commands(loaded.profile, args.identity,
                                    team.name if team else None,
                                    team.ledger_root if team else None)))
    return 0


def _teardown_command(args: argparse.Namespace) -> int:
    """``--delete-bucket`` without its confirmation is refused before the profile is read."""
    if args.delete_bucket and not args.confirm_bucket:
        print("error: --delete-bucket needs --confirm-bucket NAME (the bucket's name typed "
              "again); nothing was touched", file=sys.stderr)
        return 2
    return _with_profile(_teardown, False, args)


def _plan(args: argparse.Namespace, loaded: _Loaded) -> int:
    from flows.core.root_space import stage_estimates
    from flows.core.safe_writes import gib
    from flows.operations.plan import build_plan, render_text, write_plan

    profile, backend = loaded.profile, loaded.backend  # the plan's one backend
    plans = build_plan(profile, backend)
    if args.json:
        print(json.dumps([p.model_dump() for p in plans], indent=2))
    else:
        print(render_text(profile, plans, backend))
        if profile.gke is not None:  # measured where the profile ran before, else the guess
            print("\n" + "\n".join(_training_estimate(profile, backend, args.check)))
        if profile.gke is not None:  # whether the cap leaves room for a preemption
            from flows.operations.preemption_cost import cost_lines, preemption_cost

            print("\nOne preemption of training (docs/how-to/preemption-cost.md):\n" + "\n".join(
                f"  {line}" for line in cost_lines(preemption_cost(profile))))
            from flows.backends.gke.infra.cluster_shape import members_here, shape_lines
            from flows.config.teams import load_teams

            teams = load_teams()
            print("\n" + "\n".join(shape_lines(members_here(profile.name, profile.gke, teams),
                                                teams)))
        if estimates := stage_estimates(profile):
            print("\ndisk under local.root (estimated): " + ", ".join(
                f"{stage} {gib(size)}" for stage, size in estimates.items()))
    if args.compare_capacity and profile.gke is not None:
        from flows.backends.gke.infra.cost import compare_capacity

        print("\n" + "\n".join(compare_capacity(profile)))
    if args.compare_tpu and profile.gke is not None:
        from flows.operations.compare_tpu import compare_tpu

        print("\n" + "\n".join(compare_tpu(profile)))
    if args.out:
        from flows.core.root_space import storage_failure

        try:
            files = write_plan(profile, plans, args.out, backend)
        except OSError as exc:  # a full or read-only disk: the path and the fix
            if (failure := storage_failure("plan", exc, None)) is None:
                raise
            print(f"error: {failure.diagnosis.summary}\n  fix: "
                  f"{failure.diagnosis.fix}", file=sys.stderr)
            return 1
        print(f"\nwrote {len(files)} files to {args.out}", file=sys.stderr)
    if args.check:
        text, ok = loaded.backend.preflight()
        print("\n" + text)
        return 0 if ok else 1
    return 0


def _training_estimate(profile: Profile, backend: Backend, read_results: bool) -> list[str]:
    """The plan's training estimate (flows/operations/learned_estimate.py). The bucket's
    results are read only with --check, which reaches the cloud anyway: `tpurl plan` alone
    stays offline and says so."""
    from flows.config.eval_hours import stage_hours
    from flows.config.gke_section import gke_section
    from flows.core.layout import Layout
    from flows.core.programs import train_workload
    from flows.core.throughput import completions_per_step
    from flows.operations.learned_estimate import (
        estimate_lines,
        planned_rate_line,
        train_estimate,
    )
    from flows.run.result import READ_WITHIN_S, recent_results_within

    gke = gke_section(profile)
    guess = stage_hours(profile, "train")
    steps = train_workload(profile, Layout(profile), backend.runtime).total_steps
    unread = "`tpurl plan --check` reads the last runs' measured steps from the bucket"
    try:
        read = recent_results_within(backend.storage, profile) if read_results else []
        results = read or []
        unread = ("" if read is not None else f"the bucket's results were not read within "
                  f"{READ_WITHIN_S:.0f} s") if read_results else unread
    except Exception as exc:  # the estimate informs; the pre-flight below says more
        results, unread = [], f"the bucket's results were not read ({type(exc).__name__})"
    completions = completions_per_step(profile.train.args)
    estimate = train_estimate(guess, steps, gke.total_chips, backend.usd_per_chip_hour,
                              completions, results)
    args = profile.train.args
    try:
        longest = int(str(args.get("max_target_length", 0))) - int(
            str(args.get("max_prefill_predict_length", 0)))
    except ValueError:  # MaxText refuses such a value itself
        longest = 0
    rate = planned_rate_line(estimate.hours, steps, completions, longest, gke.total_chips,
                             backend.usd_per_chip_hour)
    return estimate_lines(estimate, steps, guess, unread) + ([rate] if rate else [])


def _run_command(args: argparse.Namespace, loaded: _Loaded) -> int:
    return _run(args.profile, loaded.overrides, args.json)


def _recipe_unimported(args: argparse.Namespace) -> str | None:
    """Why the command only reads the recipe's files (the warning's words), or None: it
    imports them. `tpurl plan` imports the team's code only when asked; validate and run
    always do, in the sandbox."""
    if args.command == "plan" and not args.import_recipe:
        return ("`tpurl plan` reads them without running the team's code; `tpurl plan "
                "--import-recipe` or `tpurl validate` imports them in a sandbox as MaxText will")
    return None


def _local_problems(profile: Profile, recipe_unimported: str | None = None) -> list[str]:
    """What can be checked here without running anything of ours: a dataset on this machine,
    an output root on this machine that is writable and has room for the run, and the
    recipe's files imported in the sandbox as MaxText will, or read when
    ``recipe_unimported`` says why (its warnings printed: imports left unchecked)."""
    from flows.core.recipe_check import check_recipe
    from flows.core.root_space import root_issues

    found = [issue.render() for issue in root_issues(profile)]
    if problem := _local_dataset_problem(profile):
        found.append(problem)
    recipe = check_recipe(profile, unimported=recipe_unimported)
    for warning in recipe.warnings:
        print(warning, file=sys.stderr)
    return found + [issue.render() for issue in recipe.issues]


def _local_dataset_problem(profile: Profile) -> str | None:
    """A dataset on this machine is checked at validation; a remote one when the run starts
    (infra stage), with the run's credentials."""
    from flows.core.dataset import FIELD, dataset_problem, dataset_uri
    from flows.core.storage import LocalStorage

    value = profile.data.train_files
    if not value or not dataset_uri(value).startswith("file://"):
        return None
    found = dataset_problem(LocalStorage(), value)
    return f"{FIELD}: {found[0]}\n    fix: {found[1]}" if found else None


def _teardown(args: argparse.Namespace, loaded: _Loaded) -> int:
    """Show what goes and what it costs, ask on a terminal (``--yes`` for scripts), then run
    the teardown flow on the same private API server as `tpurl run`."""
    profile, overrides = loaded.profile, loaded.overrides
    from flows.backends.gke.infra.destroy import confirmation_problem
    from flows.backends.gke.infra.settings import settings_from_profile
    from flows.operations.teardown import live_cluster, teardown_flow, teardown_preview

    if profile.gke is None:
        print(f"error: teardown is for GKE profiles; {profile.name} uses backend "
              f"{profile.backend}", file=sys.stderr)
        return 2
    if problem := confirmation_problem(settings_from_profile(profile), args.delete_bucket,
                                       args.confirm_bucket):
        print(f"error: {problem}; nothing was touched", file=sys.stderr)
        return 2
    # the pools it destroys, priced by the mode each bills in (read-only; unread: the profile's)
    print("\n".join(teardown_preview(profile, args.delete_bucket, *live_cluster(profile))))
    if not args.yes:
        if not sys.stdin.isatty():
            print("error: not confirmed: stdin is not a terminal; pass --yes to tear down "
                  "without asking", file=sys.stderr)
            return 2
        answer = input(f"type the cluster name ({profile.gke.cluster}) to destroy it: ")
        if answer.strip() != profile.gke.cluster:
            print("teardown cancelled; nothing was touched", file=sys.stderr)
            return 1
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    quiet_heartbeats(os.environ)
    from flows.console.interrupts import install_handlers, private_api
    from flows.console.output import command_log, render

    install_handlers()
    with command_log("teardown", profile.name, _private()) as log:
        try:
            with private_api():
                teardown_flow(profile=args.profile, overrides=overrides or None,
                              delete_bucket=args.delete_bucket,
                              confirm_bucket=args.confirm_bucket)
        except Exception as exc:
            print(f"\nteardown failed: {render(exc, log)}", file=sys.stderr)
            return 1
    return 0


def _run(profile: str, overrides: dict[str, str], as_json: bool) -> int:
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    quiet_heartbeats(os.environ)  # before Prefect is imported (flows/flow_runs/heartbeat.py)
    from flows.console.finished import finished_result
    from flows.console.interrupts import (
        EXIT_INTERRUPTED,
        ApiUnreachable,
        Interrupted,
        install_handlers,
        private_api,
        received_signal,
    )
    from flows.console.kept_api import KeptApiError

    install_handlers()
    try:
        # nothing would run: the last result, and no API server (flows/console/finished.py);
        # a configured API gets the flow run it may be watching for
        if not os.environ.get("PREFECT_API_URL") and (
                finished := finished_result(load_profile(profile, overrides))) is not None:
            print(f"{finished.profile}: every stage is done (its verified output unchanged); "
                  "nothing ran and no Prefect API server was started",
                  file=sys.stderr if as_json else sys.stdout)
            return _report(finished, profile, overrides, as_json, None)
        # tpurl's own API server is launched first; Prefect and the flow module (seconds of
        # imports) load while it boots
        with private_api(while_starting=lambda: importlib.import_module("flows.pipeline")) \
                as own_api:
            from flows import pipeline
            from flows.console.output import command_log, render

            with command_log("run", profile, own_api is not None) as log:
                try:
                    result = pipeline.rl_post_training(profile=profile,
                                                       overrides=overrides or None)
                except Exception as exc:
                    if (signum := received_signal()) is not None:
                        raise Interrupted(signum) from exc  # what the stop turned into
                    print(f"\nrun failed: {render(exc, log)}", file=sys.stderr)
                    return 1
    except ApiUnreachable as exc:
        print(f"\nrun failed: [infrastructure] {exc}", file=sys.stderr)
        return 1
    except KeptApiError as exc:
        print(f"\nrun failed: {exc}", file=sys.stderr)
        return 1
    except (Interrupted, KeyboardInterrupt) as exc:
        loaded = sys.modules.get("flows.pipeline")  # not imported yet when stopped early
        current = getattr(loaded, "CURRENT_STAGE", None)
        stage = current[0] if current else "start-up"
        again = " ".join(["tpurl run", profile, *(f"--set {k}={v}" for k, v in overrides.items())])
        print(f"\ninterrupted ({exc or 'SIGINT'}) during stage {stage}: its program was stopped "
              "and the profile's lock released. Finished stages keep their verified outputs; "
              f"training resumes from its newest checkpoint. To resume: {again}", file=sys.stderr)
        return 128 + exc.signum if isinstance(exc, Interrupted) else EXIT_INTERRUPTED
    from flows.run.result import PipelineResult

    # the flow ends a run it did not start as a Cancelled state, which a call raises (caught
    # above): what a call returns is the result
    assert isinstance(result, PipelineResult)
    return _report(result, profile, overrides, as_json, log)


def _report(result: PipelineResult, profile: str, overrides: dict[str, str], as_json: bool,
            log: Path | None) -> int:
    """What a finished `tpurl run` prints: the result as JSON, or its stages, decision and
    URIs."""
    if as_json:
        print(result.model_dump_json(indent=2))
        return 0
    print(f"\n{result.profile}: done in {result.wall_s:.1f} s"
          + (f" (of which {result.lock_wait_s:.1f} s waiting for the profile's lock)"
             if result.lock_wait_s >= 1 else ""))
    for stage in result.stages:
        print(f"  {stage.stage:<8} {stage.status:<8} {stage.duration_s:8.1f} s")
    if result.evaluation is not None:
        decision = result.evaluation["decision"]
        print(f"  {'promoted' if decision['promoted'] else 'rejected'}: {decision['reason']}")
        for note in decision.get("notes", []):
            print(f"    ({note})")
    from flows.console.output import final_lines
    from flows.run.result import result_uris

    latest = result_uris(load_profile(profile, overrides), "latest")[1]
    print("\n".join(final_lines(result, latest, log)))
    return 0


def _private() -> bool:
    """True when tpurl starts its own API server (no PREFECT_API_URL): its links die with
    the command."""
    from prefect.settings import PREFECT_API_URL

    return not PREFECT_API_URL.value()


if __name__ == "__main__":
    raise SystemExit(main())
