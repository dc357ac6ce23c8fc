"""The recipe's files checked before anything is paid for: `tpurl validate` (and plan and run)
and the flow's start refuse a recipe that MaxText would refuse minutes into a run.

A reward file with a typo, an import the image does not have or a reward function MaxText
cannot call fails on GKE only after the image is built, the cluster is up and the checkpoint
converted: a slice held for nothing. The checks that find these need the team's code imported
where it will run, so they run in a child process, the probe images/rehearsal/check_recipe.py,
under the interpreter that mirrors the post-training image (the rehearsal venv), never in this
process: the team's code at import time would otherwise run beside the flow's credentials, and
would be judged against the orchestrator's packages rather than the image's. A child of its
own is not enough: it could read this process's environment through /proc, the account's
files and the network. So a probe that imports runs in a sandbox (flows/core/recipe_sandbox.py:
no network, a /proc without this process or its parents, a root holding only the system, the
venv and a copy of the recipe's files, no privileges) with a time limit (a file that loops at
import is a problem of its own, named).

Without that venv (a machine that only drives GKE), where the machine cannot make the sandbox
(user namespaces disabled), or when the command was not asked to import (`tpurl plan` and
`tpurl check` without ``--import-recipe``), the same probe reads the files instead
(``--static``, under this interpreter, nothing of the team's run): syntax, the functions and
their signatures from the syntax tree, the template; a warning then says the imports were not
checked, why, and what makes them checked.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from flows.common.failure_codes import Failure
from flows.common.issues import Issue
from flows.common.paths import REHEARSAL_DIR, repo_relative
from flows.config.profile import LocalSection, Profile
from flows.config.recipe import recipe_path
from flows.core.processes import die_with_parent, stop_group
from flows.core.recipe_sandbox import (
    SANDBOX_PATH,
    SandboxUnavailable,
    launcher_env,
    sandbox_failure,
    sandbox_needs,
    sandboxed_command,
    strip_ready,
    unavailable_here,
)

PROBE = REHEARSAL_DIR / "check_recipe.py"
DEFAULT_VENV = str(LocalSection.model_fields["venv"].default)
REPORT_MARK = "TPURL-RECIPE-REPORT"  # the probe's lines (images/rehearsal/check_recipe.py)
IMPORTING_MARK = "TPURL-RECIPE-IMPORTING"
# Seconds the probe may take: importing a file that imports MaxText (JAX, Flax, Tunix) took
# 15 s on a loaded 2-core machine; a file that takes more does work at import that belongs in
# its functions.
IMPORT_TIMEOUT_S = 90.0
# What the venv must have to stand in for the image (a half-built one would blame the team's
# imports for what the venv lacks)
IMAGE_MODULES = ("maxtext", "tunix")
# What the reading probe's environment keeps of this process's: enough to run Python, nothing
# secret (the importing one gets the sandbox's own, flows/core/recipe_sandbox.py).
_KEPT_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "USER")
_FILE_FLAGS = ("--rewards", "--processor", "--template")
_BUILD_VENV = ("`bash scripts/rehearse.sh` (or `tpurl run rehearsal`) builds it in its image "
               "stage")

CODES = {
    "syntax": Failure.CONFIG_RECIPE_SYNTAX,
    "unreadable": Failure.CONFIG_RECIPE_IMPORT_ERROR,
    "missing-module": Failure.CONFIG_RECIPE_MISSING_MODULE,
    "import-raised": Failure.CONFIG_RECIPE_IMPORT_ERROR,
    "no-function": Failure.CONFIG_RECIPE_NO_FUNCTION,
    "not-callable": Failure.CONFIG_RECIPE_NO_FUNCTION,
    "signature": Failure.CONFIG_RECIPE_SIGNATURE,
    "template": Failure.CONFIG_RECIPE_TEMPLATE,
    "timeout": Failure.CONFIG_RECIPE_IMPORT_TIMEOUT,
    "no-report": Failure.CONFIG_RECIPE_UNCHECKED,
}


@dataclass(frozen=True)
class RecipeCheck:
    """What the check found: ``issues`` refuse the profile, ``warnings`` are printed."""

    issues: tuple[Issue, ...] = ()
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class ProbeRun:
    """One run of the probe: its interpreter, whether it imports, what the venv must have."""

    python: Path
    static: bool
    require: tuple[str, ...] = ()
    timeout_s: float = IMPORT_TIMEOUT_S


def venv_python(profile: Profile) -> Path:
    """The rehearsal venv's interpreter: the profile's ``local.venv``, else the default one
    (a GKE profile checked on a machine that has it)."""
    venv = profile.local.venv if profile.local is not None else DEFAULT_VENV
    return repo_relative(venv) / "bin" / "python"


def probe_arguments(profile: Profile) -> list[str]:
    """The recipe's files as the probe takes them; none for MaxText's built-in recipe."""
    recipe = profile.recipe
    args: list[str] = []
    if recipe.rewards is not None:
        args += ["--rewards", str(recipe_path(recipe.rewards.file)),
                 "--functions", ",".join(recipe.rewards.functions)]
    if recipe.dataset_processor is not None:
        args += ["--processor", str(recipe_path(recipe.dataset_processor))]
    if recipe.chat_template is not None:
        args += ["--template", str(recipe_path(recipe.chat_template))]
    return args


def _where(file: str, line: int | None) -> str:
    return f"{file}:{line}" if line else file


def _fix(kind: str, part: str, file: str, line: int | None, python: Path) -> str:
    where = _where(file, line)
    if kind == "syntax":
        return f"correct the syntax at {where} (`python -m py_compile {file}` shows it)"
    if kind == "missing-module":
        return ("import only what the post-training image has (MaxText 0.2.4, Tunix, JAX, "
                "NumPy and the standard library), or put the code in the file itself: only the "
                "recipe's own files travel with it, not the folder around them")
    if kind in ("import-raised", "unreadable"):
        return (f"make importing {file} succeed (it runs where MaxText loads it, before "
                "training; the check imports it in a sandbox with no network, an empty home "
                f"and only the recipe's files); `{python} -I -c \"import runpy; "
                f"runpy.run_path('{file}')\"` reproduces it")
    if kind == "timeout":
        return ("do no work at import (a loop, a download, loading a model): move it into the "
                "functions, or under `if __name__ == '__main__':`")
    if part == "dataset_processor":
        return (f"define `def process_data(dataset_name, tokenizer, template, config, x)` in "
                f"{file}, returning the row's prompts, question and answer")
    if kind in ("no-function", "not-callable"):
        return (f"define the function in {file}, or list the names it defines in "
                "recipe.rewards.functions")
    if kind == "signature":
        return ("define it as `def NAME(prompts, completions, tmvp_config=None, **kwargs)` and "
                "read the dataset's columns (question, answer) from kwargs; it returns one "
                "number per completion")
    if kind == "template":
        return ("make it a JSON object whose SYSTEM_PROMPT uses only {reasoning_start_token}, "
                "{reasoning_end_token}, {solution_start_token}, {solution_end_token} and whose "
                "TEMPLATE uses {system_prompt} and {question}; write a literal brace as {{ or }}")
    return "run `tpurl validate` again; if it says this again, report it with the output above"


def _issue(found: Mapping[str, object], python: Path) -> Issue:
    kind, part = str(found["kind"]), str(found["part"])
    file = str(found["file"])
    line = found.get("line")
    line = line if isinstance(line, int) else None
    message = str(found["message"])
    problem = f"{_where(file, line)}: {message}"
    return Issue(f"recipe.{part}", problem, _fix(kind, part, file, line, python),
                 CODES.get(kind, Failure.CONFIG_RECIPE_UNCHECKED))


def _marked(stdout: str, mark: str) -> list[dict[str, object]]:
    found = []
    for line in stdout.splitlines():
        if line.startswith(mark + " "):
            try:
                value = json.loads(line[len(mark) + 1:])
            except json.JSONDecodeError:
                continue
            if isinstance(value, dict):
                found.append(value)
    return found


def _unfinished(run: ProbeRun, stdout: str, stderr: str, timed_out: bool,
                returncode: int | None) -> RecipeCheck:
    """No report: the file being imported looped (time limit) or ended the process; with no
    file being imported, the probe itself could not run."""
    importing = _marked(stdout, IMPORTING_MARK)
    if not importing:
        tail = stderr.strip()[-600:] or "(no output)"
        return RecipeCheck(warnings=(f"warning: recipe: the check of its files could not run "
                                     f"under {run.python} (exit {returncode}): {tail}",),)
    last = importing[-1]
    file, part = str(last.get("file")), str(last.get("part"))
    if timed_out:
        found = {"kind": "timeout", "part": part, "file": file,
                 "message": f"did not finish importing within {run.timeout_s:g} s"}
    else:
        tail = stderr.strip()[-600:]
        found = {"kind": "import-raised", "part": part, "file": file,
                 "message": f"importing it ended the process (exit {returncode}) before it "
                            f"could be checked{': ' + tail if tail else ''}"}
    return RecipeCheck(issues=(_issue(found, run.python),))


def _recipe_files(arguments: list[str]) -> list[Path]:
    """The files the probe's arguments name (what the sandbox copies in)."""
    return [Path(value) for flag, value in itertools.pairwise(arguments)
            if flag in _FILE_FLAGS]


def run_probe(run: ProbeRun, arguments: list[str]) -> tuple[RecipeCheck, list[str]]:
    """The probe's findings as issues and warnings, and the modules the interpreter lacked
    of ``run.require`` (then it checked nothing). A probe that imports runs in the sandbox
    (flows/core/recipe_sandbox.py), or not at all: :class:`SandboxUnavailable` says why."""
    probe = [str(PROBE), *arguments, *(["--static"] if run.static else []),
             *(arg for module in run.require for arg in ("--require", module))]
    if run.static:  # reads the files, runs none of them
        env = {name: os.environ[name] for name in _KEPT_ENV if name in os.environ}
        return _run_child(run, [str(run.python), "-I", *probe], env, sandboxed=False)
    if why := unavailable_here():
        raise SandboxUnavailable(why)
    env = {"PATH": SANDBOX_PATH, "LANG": os.environ.get("LANG", "C.UTF-8"),
           "TMPDIR": "/tmp", "JAX_PLATFORMS": "cpu"}  # JAX looks for no accelerator
    with tempfile.TemporaryDirectory(prefix="tpurl-recipe-root-") as root:
        command = sandboxed_command(run.python, probe, [PROBE, *_recipe_files(arguments)],
                                    env, Path(root), os.geteuid())
        return _run_child(run, command, launcher_env(), sandboxed=True)


def _run_child(run: ProbeRun, command: list[str], env: dict[str, str],
               sandboxed: bool) -> tuple[RecipeCheck, list[str]]:
    try:
        child = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, errors="replace", env=env,
                                 start_new_session=True, preexec_fn=die_with_parent)
    except OSError as exc:  # the venv's interpreter cannot start
        return RecipeCheck(warnings=(f"warning: recipe: {run.python} cannot run: {exc}",)), []
    timed_out = False
    try:
        stdout, stderr = child.communicate(timeout=run.timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        stop_group(child.pid, grace_s=1.0)  # the whole group: a file may start children
        stdout, stderr = child.communicate()
    except BaseException:  # interrupted: the child's session gets no Ctrl-C of its own
        stop_group(child.pid, grace_s=1.0)
        raise
    if sandboxed:
        if not timed_out and (failed := sandbox_failure(stdout, stderr, child.returncode)):
            raise SandboxUnavailable(failed)
        stdout = strip_ready(stdout)
    reports = _marked(stdout, REPORT_MARK)
    if timed_out or not reports:
        return _unfinished(run, stdout, stderr, timed_out, child.returncode), []
    report = reports[-1]
    listed, problems = report.get("missing"), report.get("problems")
    missing = [str(m) for m in listed] if isinstance(listed, list) else []
    issues: list[Issue] = []
    warnings: list[str] = []
    for found in problems if isinstance(problems, list) else []:
        if not isinstance(found, dict):
            continue
        issue = _issue(found, run.python)
        if found.get("severity") == "warning":
            warnings.append(f"warning: {issue.field}: {issue.problem}\n    {issue.fix}")
        else:
            issues.append(issue)
    return RecipeCheck(tuple(issues), tuple(warnings)), missing


def _content_key(profile: Profile, run: ProbeRun) -> tuple[object, ...]:
    files = probe_arguments(profile)
    digests = []
    for value in files:
        path = Path(value)
        if path.is_absolute() and path.is_file():
            digests.append(hashlib.sha256(path.read_bytes()).hexdigest())
    return (run, tuple(files), tuple(digests))


_checked: dict[tuple[object, ...], RecipeCheck] = {}


def check_recipe(profile: Profile, timeout_s: float = IMPORT_TIMEOUT_S, *,
                 unimported: str | None = None) -> RecipeCheck:
    """The recipe's problems: imported in the sandbox under the rehearsal venv when it is here
    (and whole), else read statically under this interpreter with a warning; read too when
    the machine cannot make the sandbox, or when the command was not asked to import
    (``unimported`` says so, in the words the warning ends with). MaxText's built-in recipe
    has nothing to check. A recipe already checked in this process, byte for byte under the
    same interpreter, is not checked again (`tpurl run` validates, then its flow starts)."""
    arguments = probe_arguments(profile)
    if not arguments:
        return RecipeCheck()
    python = venv_python(profile)
    has_code = profile.recipe.rewards is not None or profile.recipe.dataset_processor is not None
    why_static = (f"no environment that mirrors the post-training image here ({python} is "
                  f"absent); {_BUILD_VENV}, then `tpurl validate` imports them as MaxText will")
    if unimported is not None:
        why_static = unimported
    elif python.is_file():
        run = ProbeRun(python, static=False, require=IMAGE_MODULES, timeout_s=timeout_s)
        key = _content_key(profile, run)
        if key in _checked:
            return _checked[key]
        try:
            result, missing = run_probe(run, arguments)
        except SandboxUnavailable as exc:
            why_static = (f"this machine cannot isolate the team's code to import it ({exc}); "
                          f"importing needs {sandbox_needs(os.geteuid())}")
        else:
            if not missing:
                _checked[key] = result
                return result
            why_static = (f"{python} lacks {', '.join(missing)} (a venv not fully built); "
                          f"{_BUILD_VENV}, then `tpurl validate` imports them as MaxText will")
    static = ProbeRun(Path(sys.executable), static=True, timeout_s=timeout_s)
    result, _ = run_probe(static, arguments)
    if has_code:
        result = RecipeCheck(result.issues, (
            *result.warnings, "warning: recipe: the imports of its Python files were not "
            f"checked: {why_static}"))
    return result
