"""`tpurl`: validate, plan and run a profile from the command line.

PROFILE is a name under deployments/profiles/ or a path to a YAML file; ``--set a.b=v``
overrides a field (also ``TPURL_A__B=v`` in the environment). Exit codes: 0 ok, 2 invalid
profile, 1 the run failed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from flows.backends import backend_for
from flows.config import Profile, ProfileError, load_profile, profile_names
from flows.config.loading import parse_override


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tpurl", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, text in (("validate", "check a profile; touches nothing"),
                       ("plan", "print stages, workload commands, URIs and chip-hours"),
                       ("run", "run the pipeline flow (Prefect's ephemeral API unless "
                               "PREFECT_API_URL is set)")):
        cmd = sub.add_parser(name, help=text, description=text)
        cmd.add_argument("profile", help=f"one of {', '.join(profile_names())}, or a path")
        cmd.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                         help="override a profile field, e.g. --set gke.project=my-proj")
        if name == "plan":
            cmd.add_argument("--out", type=Path, help="also write the plan as files here")
            cmd.add_argument("--check", action="store_true",
                             help="also run the pre-flight checks against the cloud (read-only)")
            cmd.add_argument("--json", action="store_true", help="print the plan as JSON")
            cmd.add_argument("--compare-capacity", action="store_true",
                             help="also compare the capacity modes' TPU chip-hours and dollars "
                                  "(GKE profiles)")
        if name == "run":
            cmd.add_argument("--json", action="store_true", help="print the result as JSON")
    down = sub.add_parser("teardown", help="destroy the profile's cluster (the bucket is kept "
                          "unless --delete-bucket and --confirm-bucket NAME)")
    down.add_argument("profile")
    down.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE")
    down.add_argument("--delete-bucket", action="store_true", help="also delete the bucket")
    down.add_argument("--confirm-bucket", metavar="NAME", help="the bucket's name, typed again")
    results = sub.add_parser("result-storage", help="create the GcsBucket block that keeps "
                             "Prefect's flow results in the profile's bucket")
    results.add_argument("profile")
    results.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE")
    sub.add_parser("profiles", help="list the shipped profiles")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "profiles":
        print("\n".join(profile_names()))
        return 0
    try:
        overrides = dict(parse_override(item) for item in args.set)
        profile = load_profile(args.profile, overrides)
    except ProfileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    backend = backend_for(profile)
    for warning in backend.validation_warnings():
        print(warning, file=sys.stderr)
    if args.command in ("validate", "plan") and (problem := _local_dataset_problem(profile)):
        print(f"error: profile {args.profile!r} is invalid (1 problem(s)):\n  - {problem}",
              file=sys.stderr)
        return 2
    if args.command == "validate":
        print(f"profile {profile.name} is valid (backend {profile.backend})")
        return 0
    if args.command == "result-storage":
        from flows.runpage.result import ensure_gcs_result_storage

        slug = ensure_gcs_result_storage(profile)
        print(f"created {slug}; set PREFECT_RESULTS_DEFAULT_STORAGE_BLOCK={slug} on the work pool")
        return 0
    if args.command == "teardown":
        from flows.teardown import teardown_flow

        try:
            teardown_flow(profile=args.profile, overrides=overrides or None,
                          delete_bucket=args.delete_bucket, confirm_bucket=args.confirm_bucket)
        except Exception as exc:
            print(f"teardown failed: {exc}", file=sys.stderr)
            return 1
        return 0
    if args.command == "plan":
        from flows.plan import build_plan, render_text, write_plan

        plans = build_plan(profile)
        if args.json:
            print(json.dumps([p.model_dump() for p in plans], indent=2))
        else:
            print(render_text(profile, plans))
        if args.compare_capacity and profile.gke is not None:
            from flows.backends.gke.infra.cost import compare_capacity

            print("\n" + "\n".join(compare_capacity(profile)))
        if args.out:
            files = write_plan(profile, plans, args.out)
            print(f"\nwrote {len(files)} files to {args.out}", file=sys.stderr)
        if args.check:
            text, ok = backend.preflight()
            print("\n" + text)
            return 0 if ok else 1
        return 0
    return _run(args.profile, overrides, args.json)


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


def _run(profile: str, overrides: dict[str, str], as_json: bool) -> int:
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    from flows import pipeline
    from flows.interrupts import EXIT_INTERRUPTED, Interrupted, install_handlers, private_api

    install_handlers()
    try:
        with private_api():
            result = pipeline.rl_post_training(profile=profile, overrides=overrides or None)
    except (Interrupted, KeyboardInterrupt) as exc:
        stage = pipeline.CURRENT_STAGE[0] if pipeline.CURRENT_STAGE else "start-up"
        again = " ".join(["tpurl run", profile, *(f"--set {k}={v}" for k, v in overrides.items())])
        print(f"\ninterrupted ({exc or 'SIGINT'}) during stage {stage}: its program was stopped "
              "and the profile's lock released. Finished stages keep their verified outputs; "
              f"training resumes from its newest checkpoint. To resume: {again}", file=sys.stderr)
        return 128 + exc.signum if isinstance(exc, Interrupted) else EXIT_INTERRUPTED
    except Exception as exc:
        print(f"\nrun failed: {exc}", file=sys.stderr)
        return 1
    if as_json:
        print(result.model_dump_json(indent=2))
        return 0
    print(f"\n{result.profile}: done in {result.wall_s:.1f} s"
          + (f" (of which {result.lock_wait_s:.1f} s waiting for the profile's lock)"
             if result.lock_wait_s >= 1 else ""))
    for stage in result.stages:
        print(f"  {stage.stage:<8} {stage.status:<8} {stage.duration_s:8.1f} s")
    for name, uri in result.artifacts.items():
        print(f"  {name}: {uri}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
