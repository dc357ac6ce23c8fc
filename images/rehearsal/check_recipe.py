"""Check a profile's recipe files the way MaxText will load them, and print one JSON report.

Why a program of its own: the files are the team's code. Importing them in the orchestrator
would run that code in the process that holds the credentials and the flow, with the
orchestrator's packages rather than the image's, so a missing module would go unseen (or be
found where the image has none). This runs in the interpreter that will run the recipe (the
rehearsal venv, which mirrors the post-training image) and imports each file as MaxText 0.2.4
does (``utils_rl.load_custom_callable``: ``spec_from_file_location`` and ``exec_module``, the
file's folder not on ``sys.path``), so what fails here fails there, before anything is paid for.

``--static`` checks without importing (the orchestrator's own interpreter, on a machine
without that environment): the syntax, the functions and their signatures read from the
syntax tree, and the template. Imports are then not checked; the caller says so.

What is checked, each problem naming the file and, when there is one, the line:
- the file compiles (a ``SyntaxError``'s line);
- importing it raises nothing: a module the environment lacks (``ModuleNotFoundError``, with
  the line of the team's file that imported it) or any other exception (its type, message
  and the team's line);
- each listed reward function exists (else the closest defined name), is callable, and takes
  the call MaxText and Tunix make: ``fn(prompts=..., completions=..., tmvp_config=...,
  mode=..., **columns)`` (``train_rl.make_reward_fn`` adds ``tmvp_config``; Tunix 0.1.8's
  ``rl/reward_manager.py`` passes ``mode`` and the dataset's columns, ``question`` and
  ``answer`` from MaxText's ``process_data``), so it needs ``**kwargs``;
- ``process_data`` exists and takes ``(dataset_name, tokenizer, template, config, x)``
  positionally (``train_rl.prepare_datasets``);
- the template is a JSON object whose ``SYSTEM_PROMPT`` and ``TEMPLATE`` format with exactly
  the fields ``utils_rl.format_maxtext_messages`` fills.

Output: while importing, a line ``TPURL-RECIPE-IMPORTING {"part": ..., "file": ...}`` per
file (so a caller that has to stop a file looping at import knows which); at the end one line
``TPURL-RECIPE-REPORT {"mode": ..., "problems": [...]}``. What the team's files print at
import goes to stderr. Standard library only: it runs in any of the environments.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import difflib
import importlib.util
import inspect
import json
import os
import string
import sys
import traceback
from dataclasses import asdict, dataclass, replace
from types import ModuleType
from typing import Any, TextIO

REPORT_MARK = "TPURL-RECIPE-REPORT"
IMPORTING_MARK = "TPURL-RECIPE-IMPORTING"
# the parts of the recipe, as the profile's fields below ``recipe.`` name them
REWARDS_FILE, REWARD_FUNCTIONS = "rewards.file", "rewards.functions"
PROCESSOR, TEMPLATE = "dataset_processor", "chat_template"
# One call as MaxText and Tunix make it (the values only need to bind).
REWARD_CALL: dict[str, object] = {"prompts": ["p"], "completions": ["c"], "tmvp_config": None,
                                  "mode": "train", "question": "q", "answer": "a"}
# Tunix 0.1.8 (rl/reward_manager.py) also passes a parameter named like a field of the
# algorithm's config (GRPOConfig, rl/grpo/grpo_learner.py) its value, so such a parameter is
# filled though no column carries it.
ALGO_CONFIG_FIELDS = ("algo_variant", "advantage_estimator", "policy_loss_fn", "loss_agg_mode",
                      "reward_manager", "loss_algo", "num_generations", "num_iterations", "beta",
                      "kl_loss_mode", "epsilon", "use_rollout_logps", "sampler_is",
                      "sampler_is_threshold", "kl_clamp_value")
REWARD_CALL_TEXT = ("fn(prompts=..., completions=..., tmvp_config=..., mode=..., question=..., "
                    "answer=..., and the dataset's other columns)")
PROCESS_DATA = "process_data"
PROCESS_DATA_ARGS = ("dataset_name", "tokenizer", "template", "config", "x")
# utils_rl.format_maxtext_messages: the keys it reads and the fields each is formatted with
TEMPLATE_FIELDS: dict[str, tuple[str, ...]] = {
    "SYSTEM_PROMPT": ("reasoning_start_token", "reasoning_end_token", "solution_start_token",
                      "solution_end_token"),
    "TEMPLATE": ("system_prompt", "question"),
}


@dataclass(frozen=True)
class Problem:
    """One finding: the recipe part it belongs to, what kind, where, and what is wrong."""

    part: str
    kind: str
    file: str
    line: int | None
    message: str
    severity: str = "problem"  # or "warning": reported, not refused


# --- the signatures --------------------------------------------------------------------

def reward_signature_problem(signature: inspect.Signature) -> str | None:
    """Why MaxText's call of a reward function would fail on ``signature``, or None."""
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in signature.parameters.values()):
        return (f"has no **kwargs, so it cannot take the call MaxText makes, {REWARD_CALL_TEXT}"
                "; add **kwargs to its parameters")
    filled = {name: None for name in ALGO_CONFIG_FIELDS if name in signature.parameters}
    try:
        signature.bind(**REWARD_CALL, **filled)
    except TypeError as exc:
        return (f"cannot take the call MaxText makes, {REWARD_CALL_TEXT}: {exc}; take those "
                "by keyword and give any other parameter a default")
    return None


def processor_signature_problem(signature: inspect.Signature) -> str | None:
    """Why ``process_data(dataset_name, tokenizer, template, config, x)`` would fail, or None."""
    try:
        signature.bind(*PROCESS_DATA_ARGS)
    except TypeError as exc:
        return (f"cannot take MaxText's call process_data({', '.join(PROCESS_DATA_ARGS)}), "
                f"five positional arguments: {exc}")
    return None


# --- what a file defines, imported or read --------------------------------------------

@dataclass(frozen=True)
class Defined:
    """A top-level name: whether it is callable (None: cannot tell), its line, its signature
    (None: cannot tell, e.g. a decorated function read without importing)."""

    callable: bool | None
    line: int | None
    signature: inspect.Signature | None
    kind: str


def _unwrapped(value: object) -> object:
    try:
        return inspect.unwrap(value)  # type: ignore[arg-type]
    except ValueError:  # a __wrapped__ chain that loops
        return value


def _imported_names(module: ModuleType, path: str, wanted: list[str]) -> dict[str, Defined]:
    """The module's names, and those of ``wanted`` its ``__getattr__`` serves (MaxText asks
    with ``getattr``)."""
    found = {}
    values = {name: value for name, value in vars(module).items() if not name.startswith("__")}
    for name in wanted:
        if name not in values:
            try:
                values[name] = getattr(module, name)
            except Exception:  # whatever the module's __getattr__ raises: not served
                continue
    for name, value in values.items():
        if not callable(value):
            found[name] = Defined(False, None, None, type(value).__name__)
            continue
        signature: inspect.Signature | None
        try:
            signature = inspect.signature(value)
        except (TypeError, ValueError):  # a builtin or a class without one
            signature = None
        line = None
        inner = _unwrapped(value)
        code = getattr(inner, "__code__", None)
        if code is not None and os.path.abspath(code.co_filename) == os.path.abspath(path):
            line = code.co_firstlineno
        kind = "function" if inspect.isfunction(inner) else type(value).__name__
        found[name] = Defined(True, line, signature, kind)
    return found


_LITERALS = (ast.Constant, ast.List, ast.Tuple, ast.Dict, ast.Set, ast.JoinedStr, ast.ListComp,
             ast.DictComp, ast.SetComp)


def _parameter(name: str, kind: inspect._ParameterKind, has_default: bool) -> inspect.Parameter:
    return inspect.Parameter(name, kind, default=0 if has_default else inspect.Parameter.empty)


def ast_signature(args: ast.arguments) -> inspect.Signature:
    """A def's signature from its syntax alone (defaults stand in, never evaluated)."""
    kinds = inspect.Parameter
    positional = [*args.posonlyargs, *args.args]
    first_default = len(positional) - len(args.defaults)
    params = [_parameter(a.arg, kinds.POSITIONAL_ONLY if i < len(args.posonlyargs)
                         else kinds.POSITIONAL_OR_KEYWORD, i >= first_default)
              for i, a in enumerate(positional)]
    if args.vararg is not None:
        params.append(_parameter(args.vararg.arg, kinds.VAR_POSITIONAL, False))
    params += [_parameter(a.arg, kinds.KEYWORD_ONLY, d is not None)
               for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True)]
    if args.kwarg is not None:
        params.append(_parameter(args.kwarg.arg, kinds.VAR_KEYWORD, False))
    return inspect.Signature(params)


def _top_level(body: list[ast.stmt]) -> list[ast.stmt]:
    """The module's statements, with those inside a top-level if/try/with (a guarded import,
    a definition per platform)."""
    found: list[ast.stmt] = []
    for node in body:
        found.append(node)
        if isinstance(node, ast.If | ast.With):
            found += _top_level([*node.body, *getattr(node, "orelse", [])])
        elif isinstance(node, ast.Try):
            found += _top_level([*node.body, *[s for h in node.handlers for s in h.body],
                                 *node.orelse, *node.finalbody])
    return found


def read_names(tree: ast.Module) -> tuple[dict[str, Defined], bool]:
    """The top-level names a module defines, read from its syntax; and whether it may define
    more than can be read (a module ``__getattr__``, a star import, ``globals()`` writes)."""
    found: dict[str, Defined] = {}
    open_ended = False
    for node in _top_level(tree.body):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            signature = None if node.decorator_list else ast_signature(node.args)
            found[node.name] = Defined(True, node.lineno, signature, "function")
            open_ended |= node.name == "__getattr__"
        elif isinstance(node, ast.ClassDef):
            found[node.name] = Defined(True, node.lineno, None, "class")
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            value = node.value
            for target in targets:
                if isinstance(target, ast.Name):
                    literal = isinstance(value, _LITERALS)
                    if isinstance(value, ast.Lambda):
                        found[target.id] = Defined(True, node.lineno, ast_signature(value.args),
                                                   "lambda")
                    else:
                        kind = (type(value.value).__name__ if isinstance(value, ast.Constant)
                                else type(value).__name__.lower())
                        found[target.id] = Defined(False if literal else None, node.lineno, None,
                                                   kind if literal else "value")
        elif isinstance(node, ast.Import | ast.ImportFrom):
            for alias in node.names:
                if alias.name == "*":
                    open_ended = True
                    continue
                name = alias.asname or alias.name.split(".")[0]
                found[name] = Defined(None, node.lineno, None, "imported name")
    open_ended |= any(isinstance(node, ast.Name) and node.id in ("globals", "setattr")
                      for node in ast.walk(tree))
    return found, open_ended


# --- the checks of one part ------------------------------------------------------------

def _closest(name: str, names: dict[str, Defined]) -> str:
    candidates = [n for n, d in names.items() if d.callable is not False]
    match = difflib.get_close_matches(name, candidates, n=1, cutoff=0.6)
    if match:
        return f" (did you mean {match[0]!r}?)"
    # the functions of the file's own (a line in it), not what it imports
    own = sorted(n for n, d in names.items()
                 if d.callable and d.line is not None and d.kind in ("function", "lambda")
                 and not n.startswith("_"))
    return f" (it defines {', '.join(own[:8])})" if own else " (it defines no function)"


def check_functions(path: str, names: dict[str, Defined], open_ended: bool,
                    functions: list[str]) -> list[Problem]:
    problems = []
    for name in functions:
        found = names.get(name)
        if found is None:
            if not open_ended:
                problems.append(Problem(REWARD_FUNCTIONS, "no-function", path, None,
                                        f"defines no function {name!r}{_closest(name, names)}"))
        elif found.callable is False:
            problems.append(Problem(REWARD_FUNCTIONS, "not-callable", path, found.line,
                                    f"{name!r} is a value of type {found.kind}, not a "
                                    "function"))
        elif found.signature is not None and (
                why := reward_signature_problem(found.signature)):
            problems.append(Problem(REWARD_FUNCTIONS, "signature", path, found.line,
                                    f"reward function {name!r} {why}"))
    return problems


def check_processor(path: str, names: dict[str, Defined], open_ended: bool) -> list[Problem]:
    found = names.get(PROCESS_DATA)
    if found is None:
        if open_ended:
            return []
        return [Problem(PROCESSOR, "no-function", path, None, "defines no function "
                        f"{PROCESS_DATA!r}{_closest(PROCESS_DATA, names)}; MaxText calls "
                        f"process_data({', '.join(PROCESS_DATA_ARGS)}) for each row")]
    if found.callable is False:
        return [Problem(PROCESSOR, "not-callable", path, found.line,
                        f"{PROCESS_DATA!r} is a value of type {found.kind}, not a function")]
    if found.signature is not None and (why := processor_signature_problem(found.signature)):
        return [Problem(PROCESSOR, "signature", path, found.line, f"process_data {why}")]
    return []


def _key_line(text: str, key: str) -> int | None:
    at = text.find(f'"{key}"')
    return text.count("\n", 0, at) + 1 if at >= 0 else None


def _format_problem(key: str, value: object, fields: tuple[str, ...]) -> str | None:
    """Why ``value.format(**fields)`` fails as MaxText calls it, or None."""
    filled = ", ".join("{" + f + "}" for f in fields)
    if not isinstance(value, str):
        return f"{key} is {type(value).__name__} {value!r}, not text"
    try:
        value.format(**{field: f"<{field}>" for field in fields})
    except KeyError as exc:
        return (f"{key} has the placeholder {{{exc.args[0]}}}, which MaxText does not fill (it "
                f"fills {filled}); write a literal brace as {{{{ or }}}}")
    except IndexError:
        return (f"{key} has a positional placeholder {{}} or {{0}}; MaxText fills only "
                f"{filled} (a literal brace is {{{{ or }}}})")
    except (ValueError, AttributeError, TypeError) as exc:
        return f"{key} is not a format string MaxText can fill ({exc}); a literal brace is {{{{ or }}}}"
    return None


def check_template(path: str, own_processor: bool) -> list[Problem]:
    """The template as ``load_data_template_from_file`` and ``format_maxtext_messages`` read
    it. With a processor of the team's own, the keys are warnings: its ``process_data`` gets
    the template as it is, though MaxText's agentic rollout still reads them."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as exc:
        return [Problem(TEMPLATE, "template", path, None, f"cannot be read: {exc}")]
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        return [Problem(TEMPLATE, "template", path, exc.lineno, "is not valid JSON "
                        f"({exc.msg} at line {exc.lineno} column {exc.colno}); MaxText would "
                        "load no template and stop with \"Data template is required\"")]
    if not isinstance(data, dict):
        return [Problem(TEMPLATE, "template", path, None, "holds a JSON "
                        f"{type(data).__name__}, not an object with SYSTEM_PROMPT and TEMPLATE")]
    severity = "warning" if own_processor else "problem"
    problems = []
    for key, fields in TEMPLATE_FIELDS.items():
        if key not in data:
            problems.append(Problem(TEMPLATE, "template", path, None, f"has no {key} "
                                    "(MaxText's process_data formats every question with "
                                    "SYSTEM_PROMPT and TEMPLATE)", severity))
        elif why := _format_problem(key, data[key], fields):
            problems.append(Problem(TEMPLATE, "template", path, _key_line(text, key), why,
                                    severity))
    template = data.get("TEMPLATE")
    if isinstance(template, str) and not problems:
        used = {field for _, field, _, _ in string.Formatter().parse(template) if field}
        if "question" not in used:
            problems.append(Problem(TEMPLATE, "template", path, _key_line(text, "TEMPLATE"),
                                    "TEMPLATE has no {question}, so every prompt "
                                    "would be the same text", severity))
    return problems


# --- one file: compiled, then imported or read -------------------------------------------

def _team_line(tb: traceback.StackSummary, path: str) -> int | None:
    mine = [frame.lineno for frame in tb
            if os.path.abspath(frame.filename) == os.path.abspath(path)]
    return mine[-1] if mine else None


def _syntax_problem(part: str, path: str, exc: BaseException) -> Problem:
    line = getattr(exc, "lineno", None)
    message = getattr(exc, "msg", None) or str(exc) or type(exc).__name__
    return Problem(part, "syntax", path, line if isinstance(line, int) else None,
                   f"{type(exc).__name__}: {message}")


def _compiled(part: str, path: str) -> tuple[ast.Module | None, list[Problem]]:
    try:
        with open(path, "rb") as f:
            source = f.read()
    except OSError as exc:
        return None, [Problem(part, "unreadable", path, None, f"cannot be read: {exc}")]
    try:
        tree = ast.parse(source, path)
        compile(tree, path, "exec")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        return None, [_syntax_problem(part, path, exc)]
    return tree, []


def _announce(out: TextIO, part: str, path: str) -> None:
    print(f"{IMPORTING_MARK} " + json.dumps({"part": part, "file": path}), file=out, flush=True)


def _import_problem(part: str, path: str, exc: BaseException) -> Problem:
    line = _team_line(traceback.extract_tb(exc.__traceback__), path)
    if isinstance(exc, ModuleNotFoundError):
        return Problem(part, "missing-module", path, line,
                       f"imports {exc.name!r}, which the environment that runs the recipe does "
                       f"not have ({exc})")
    if isinstance(exc, SyntaxError) and exc.filename != path:  # in a module it imports
        return Problem(part, "import-raised", path, line, "importing it raised "
                       f"SyntaxError in {exc.filename}:{exc.lineno}: {exc.msg}")
    if isinstance(exc, SystemExit):
        return Problem(part, "import-raised", path, line, f"importing it called exit({exc.code!r})")
    return Problem(part, "import-raised", path, line,
                   f"importing it raised {type(exc).__name__}: {exc}")


def _imported(part: str, path: str, module_name: str, wanted: list[str],
              out: TextIO) -> tuple[dict[str, Defined] | None, list[Problem]]:
    """Import as ``load_custom_callable`` does; the team's prints go to stderr."""
    tree, problems = _compiled(part, path)
    if tree is None:
        return None, problems
    _announce(out, part, path)
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        return None, [Problem(part, "import-raised", path, None,
                              "cannot be imported as a Python file")]
    module = importlib.util.module_from_spec(spec)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            spec.loader.exec_module(module)
    except BaseException as exc:  # anything the team's code raises (exit included) is theirs
        return None, [_import_problem(part, path, exc)]
    lines = {name: d.line for name, d in read_names(tree)[0].items()}
    return {name: d if d.callable else replace(d, line=lines.get(name))
            for name, d in _imported_names(module, path, wanted).items()}, []


def _read(part: str, path: str) -> tuple[tuple[dict[str, Defined], bool] | None, list[Problem]]:
    tree, problems = _compiled(part, path)
    return (None, problems) if tree is None else (read_names(tree), [])


def check(rewards: str | None, functions: list[str], processor: str | None,
          template: str | None, static: bool, out: TextIO) -> list[Problem]:
    problems: list[Problem] = []
    for part, path, module_name in ((REWARDS_FILE, rewards, "tpurl_recipe_rewards"),
                                    (PROCESSOR, processor, "tpurl_recipe_processor")):
        if path is None:
            continue
        names: dict[str, Defined] | None
        if static:
            read, found = _read(part, path)
            names, open_ended = read if read is not None else (None, False)
        else:
            wanted = functions if part == REWARDS_FILE else [PROCESS_DATA]
            names, found = _imported(part, path, module_name, wanted, out)
            open_ended = False  # imported: getattr answers what the module serves
        problems += found
        if names is None:
            continue
        if part == REWARDS_FILE:
            problems += check_functions(path, names, open_ended, functions)
        else:
            problems += check_processor(path, names, open_ended)
    if template is not None:
        problems += check_template(template, own_processor=processor is not None)
    return problems


def main(argv: list[str] | None = None, out: TextIO | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rewards", help="the reward functions' file")
    parser.add_argument("--functions", default="", help="the reward functions, a,b")
    parser.add_argument("--processor", help="the dataset processor's file")
    parser.add_argument("--template", help="the JSON data template")
    parser.add_argument("--static", action="store_true", help="read the files, import none")
    parser.add_argument("--require", action="append", default=[], metavar="MODULE",
                        help="a module the environment must have to stand in for the image")
    args = parser.parse_args(argv)
    out = out or sys.stdout
    missing = [name for name in args.require if importlib.util.find_spec(name) is None]
    if missing:
        report: dict[str, Any] = {"mode": "none", "missing": missing, "problems": []}
    else:
        if not args.static:
            # train_rl has imported utils_rl (whose math_verify_pool annotates with
            # multiprocessing.pool.Pool at definition time) before it loads a team's file;
            # a file importing utils_rl alone would otherwise fail here but not there
            import multiprocessing.pool  # noqa: F401
        functions = [n.strip() for n in args.functions.split(",") if n.strip()]
        found = check(args.rewards, functions, args.processor, args.template, args.static, out)
        report = {"mode": "static" if args.static else "import", "missing": [],
                  "problems": [asdict(p) for p in found]}
    print(f"{REPORT_MARK} " + json.dumps(report), file=out, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
