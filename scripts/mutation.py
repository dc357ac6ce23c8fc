"""Mutation testing of the pure decision modules, on demand, not in CI.

Each module is mutated by mutmut with only the tests that cover it, in a scratch copy of the
tree under .tpurl/mutation/<module>/ (mutmut reads its [tool.mutmut] table from the
pyproject.toml of the directory it runs in, so every module gets its own table there and the
project's own pyproject.toml stays free of it). The score of a module is the share of its
mutants a test kills (a timeout counts as killed: the mutant made the tests hang); a mutant no
test runs counts as surviving. Functions that are I/O glue rather than decisions are listed in
``glue`` and left out of the score (their mutants are still made; none is hidden).

A module outside flows/ (the reward guard under images/rehearsal/, a file the programs load
by path) is mutated the same way: its folder joins mutmut's ``source_paths``, so the copy the
tests run from (mutants/) holds the mutated file where ``flows.common.paths`` places it.
mutmut switches a mutant on only in a module whose ``__name__`` is the file's dotted path
(``images.rehearsal.reward_guard``), so tests that load such a file by path name the module
so; when no test does, every mutant goes unchecked and the run stops saying so.

    scripts/mutation.sh                  # every module
    scripts/mutation.sh promotion spend  # some; --survivors prints each survivor's diff
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRATCH = ROOT / ".tpurl" / "mutation"
DATA = ("deployments", "images", "docs")  # profiles, patches and pages the tests read beside flows/
KILLED = {"killed", "timeout", "caught by type check", "segfault"}


@dataclass(frozen=True)
class Module:
    path: str
    tests: tuple[str, ...]
    glue: tuple[str, ...] = field(default=())  # functions that are I/O, not the decision


_EVICTIONS = "tests/backends/gke/watch/test_kueue_evictions.py"
MODULES = {
    "announce-decide": Module("flows/announcements/decide.py", (
        "tests/announcements/test_decide.py", "tests/announcements/test_decide_orderings.py",
        "tests/announcements/test_decide_details.py")),
    "announce-admission": Module("flows/announcements/admission.py", (
        "tests/announcements/test_admission.py",)),
    "announce-guard": Module("flows/announcements/guard.py", (
        "tests/announcements/test_decide.py", "tests/announcements/test_decide_details.py"),
        glue=("was_coalesced",)),
    # the pure verdict tests only: the fake-API-server tests that also reach diagnose() (the
    # rest of test_kueue_evictions.py, test_faults.py, ...) made 1095 mutants take hours
    "gke-verdict": Module("flows/backends/gke/watch/verdict.py", (
        "tests/backends/gke/watch/test_verdict.py",
        "tests/backends/gke/watch/test_verdict_details.py",
        "tests/backends/gke/watch/test_verdict_texts.py",
        "tests/backends/gke/watch/test_budget_verdicts.py",
        f"{_EVICTIONS}::test_a_re_queued_eviction_waits_and_says_when_kueue_re_queues_it",
        f"{_EVICTIONS}::test_a_deactivated_workload_fails_at_once_and_says_it_is_not_re_queued")),
    "gke-recovery": Module("flows/backends/gke/recovery.py", (
        "tests/backends/gke/test_recovery.py", "tests/backends/gke/test_recovery_details.py")),
    "spend-meter": Module("flows/backends/gke/watch/spend.py", (
        "tests/backends/gke/watch/test_spend_meter.py", "tests/backends/gke/watch/test_node_meter.py",
        "tests/backends/gke/watch/test_spend_gone_pods.py",
        "tests/backends/gke/watch/test_budget_verdicts.py",
        "tests/backends/gke/test_spend_cap.py", "tests/backends/gke/test_spend_timeline.py"),
        glue=("run_key", "spent_in_run")),
    "spend-config": Module("flows/config/spend.py", (
        "tests/config/test_spend_rules.py",
        "tests/backends/gke/test_spend_cap.py", "tests/backends/gke/test_spend_timeline.py")),
    "promotion": Module("flows/core/promotion.py", (
        "tests/core/test_promotion.py", "tests/core/test_promotion_rules.py")),
    "lineage": Module("flows/core/lineage.py", (
        "tests/core/test_lineage_rules.py", "tests/stages/test_damaged_records.py",
        "tests/stages/test_record_escapes.py")),
    "error-redaction": Module("flows/core/error_redaction.py", (
        "tests/core/test_error_redaction_rules.py",)),
    "redaction": Module("flows/core/redaction.py", (
        "tests/core/test_redaction.py", "tests/core/test_redaction_rules.py",
        "tests/core/test_redaction_leaks.py"),
                        glue=("install_log_redaction",)),
    "run-choices": Module("flows/deployed/run_choices.py", (
        "tests/test_run_choices.py",), glue=("refuse_run_choices",)),
    "queued": Module("flows/backends/gke/watch/queued.py", (
        "tests/backends/gke/watch/test_queued.py",)),
    "team-budget": Module("flows/core/team_budget.py", (
        "tests/run/test_team_budget.py", "tests/run/test_team_month_order.py",
        "tests/run/test_ledger_attacks.py", "tests/backends/gke/test_spend_cap.py",
        "tests/run/test_team_budget_edges.py")),
    "fit-rules": Module("flows/config/fit_rules.py", (
        "tests/config/test_fit.py", "tests/config/test_fit_table.py",
        "tests/config/test_fit_texts.py", "tests/config/test_rollout.py")),
    "watch-set": Module("flows/core/watch_set.py", ("tests/operations/test_watch_set.py",)),
    "vm-created": Module("flows/backends/gke/watch/vm_created.py", (
        "tests/backends/gke/watch/test_node_meter.py",), glue=("_authorized",)),
    "dispatch-seal": Module("flows/announcements/seal.py", (
        "tests/announcements/test_record.py",)),
    "identity-setup": Module("flows/backends/gke/identity_setup.py", (
        "tests/backends/gke/test_flow_identity.py", "tests/backends/gke/test_identity.py")),
    "reward-guard": Module("images/rehearsal/reward_guard.py", (
        "tests/core/test_reward_guard.py",)),
    # the stand-in interpreter of test_api_server_rules.py launches, waits for and stops a
    # server in milliseconds; tests/test_api_access.py attacks the real one (a Prefect
    # server start per test: too slow to run per mutant)
    "api-server": Module("flows/console/api_server.py", ("tests/test_api_server_rules.py",)),
    # the state file and who may use it, the key, reuse or refusal, the keeper's launch
    # (through a stand-in interpreter); glue: the keeper's own loop (keep), the lease's wait
    # for health and `tpurl api-server start`, which wait on a real server and are proven by
    # tests/test_kept_api.py's server-starting tests
    "kept-api": Module("flows/console/kept_api.py", (
        "tests/test_kept_api_rules.py",
        "tests/test_kept_api.py::test_a_bad_keep_time_names_the_variable_and_the_fix",
        "tests/test_kept_api.py::test_idle_time_counts_from_the_last_use_and_not_while_in_use",
    ), glue=("keep", "wait", "start_command")),
    # the REST seam to Google's APIs, over a real HTTP server and a real google-auth session;
    # glue: the constructor's Application Default Credentials and image_exists, which asks a
    # registry (tests/backends/gke/infra/test_image_exists.py, with dockerd's registry)
    "cloud-rest": Module("flows/backends/gke/infra/cloud.py", (
        "tests/backends/gke/infra/test_rest_apis.py",
        "tests/backends/gke/infra/test_rest_api_calls.py",
        "tests/backends/gke/infra/test_preflight_zones.py",
        "tests/backends/gke/infra/test_kueue_objects_version.py"),
        glue=("__init__", "image_exists")),
    # a property is never mutated: Declared's properties answer through plain functions;
    # deployment_declared is the read through Prefect's API (glue), proven against a real
    # server by tests/test_refused_overrides.py
    "declared-vars": Module("flows/deployed/declared.py", (
        "tests/test_declared.py", "tests/test_run_choices.py"), glue=("deployment_declared",)),
}
# mutmut mutates function bodies only: flows/common/token_shapes.py is module-level patterns,
# so it is mutated through the functions that use them (the "redaction" module's tests).

_NAME = re.compile(r"^\s*(?P<mutant>\S+__mutmut_\d+): (?P<status>.+)$")


def source_paths(module: Module) -> tuple[str, ...]:
    """flows/, which every test imports, and the module's own folder when it lies outside
    flows/ (mutmut copies its source paths into mutants/ and mutates only there)."""
    folder = Path(module.path).parent
    return ("flows",) if folder.parts[0] == "flows" else ("flows", folder.as_posix())


def mutmut_table(module: Module) -> str:
    tests = ", ".join(f'"{t}"' for t in module.tests)
    sources = ", ".join(f'"{s}"' for s in source_paths(module))
    return ("\n[tool.mutmut]\n"
            f"source_paths = [{sources}]\n"
            f"also_copy = [{', '.join(repr(d).replace(chr(39), chr(34)) for d in DATA)}]\n"
            f'only_mutate = ["{module.path}"]\n'
            f"pytest_add_cli_args_test_selection = [{tests}]\n"
            'pytest_add_cli_args = ["-p", "no:cacheprovider", "-q", "-x"]\n'
            "use_git_change_detection = false\n")


def function_of(mutant: str) -> str:
    """``flows.core.promotion.x_decide__mutmut_3`` → decide; a method's mutant
    (``xǁClassǁmethod__mutmut_1``) → method."""
    last = mutant.rsplit(".", 1)[-1].rsplit("__mutmut_", 1)[0]
    return last.split("ǁ")[-1] if "ǁ" in last else last.removeprefix("x_")


def run_module(name: str, module: Module, children: int, survivors: bool) -> tuple[int, int]:
    work = SCRATCH / name
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    tops = dict.fromkeys(("tests", *DATA, *(Path(p).parts[0] for p in source_paths(module))))
    for part in tops:
        shutil.copytree(ROOT / part, work / part,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    (work / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text()
                                         + mutmut_table(module))
    mutmut = str(Path(sys.executable).parent / "mutmut")
    log = work / "mutmut-run.log"
    with log.open("w") as out:
        subprocess.run([mutmut, "run", "--max-children", str(children)], cwd=work,
                       stdout=out, stderr=subprocess.STDOUT, check=False,
                       env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    listing = subprocess.run([mutmut, "results", "--all", "true"], cwd=work, text=True,
                             capture_output=True, check=False).stdout
    statuses = [(m["mutant"], m["status"].strip()) for line in listing.splitlines()
                if (m := _NAME.match(line))]
    if not statuses:
        raise SystemExit(f"{name}: mutmut produced no mutants; see {log}")
    if all(s == "not checked" for _, s in statuses):
        said = [ln.strip() for ln in log.read_text(errors="replace").splitlines()
                if ln.startswith(("Stopping early", "Recorded keys", "Expected keys"))]
        raise SystemExit(f"{name}: no test reached a mutant of {module.path} (a test that "
                         f"loads it by path must name its module by its dotted path); see {log}"
                         + "".join(f"\n    {line}" for line in said))
    scored = [(m, s) for m, s in statuses if function_of(m) not in module.glue]
    killed = sum(s in KILLED for _, s in scored)
    left = [(m, s) for m, s in scored if s not in KILLED]
    print(f"{name:20} {module.path:42} {killed:4}/{len(scored):<4} killed "
          f"{100 * killed / max(len(scored), 1):5.1f} %"
          + (f"  (glue left out: {len(statuses) - len(scored)})" if module.glue else ""),
          flush=True)
    for mutant, status in left:
        print(f"    {status:10} {mutant}")
        if survivors:
            diff = subprocess.run([mutmut, "show", mutant], cwd=work, text=True,
                                  capture_output=True, check=False).stdout
            print("      " + "\n      ".join(diff.strip().splitlines()[2:]))
    return killed, len(scored)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("modules", nargs="*", help=f"of {', '.join(MODULES)} (default: all)")
    parser.add_argument("--children", type=int, default=2, help="mutants run at once")
    parser.add_argument("--survivors", action="store_true", help="print each survivor's diff")
    parser.add_argument("--min-score", type=float, default=90.0,
                        help="exit 1 when a module scores below this percentage")
    args = parser.parse_args()
    if unknown := [m for m in args.modules if m not in MODULES]:
        parser.error(f"unknown module {', '.join(unknown)}; known: {', '.join(MODULES)}")
    low = []
    for name in args.modules or list(MODULES):
        killed, total = run_module(name, MODULES[name], args.children, args.survivors)
        if 100 * killed < args.min_score * total:
            low.append(name)
    if low:
        print(f"below {args.min_score:g} %: {', '.join(low)}")
    return 1 if low else 0


if __name__ == "__main__":
    sys.exit(main())
