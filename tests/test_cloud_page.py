"""docs/how-to/deploy-prefect-cloud.md as written, from a clean checkout up to `prefect cloud
login` (which needs a workspace, and so a network, that this machine does not have).

The page's bash blocks are read in order (tests/support/readme.py). Before the login block,
each runs for real through bash in a copy of the checkout's files (no venv, no `.tpurl`, a
new home: what a clone has), except the install block, whose one command is
`bash scripts/setup.sh` (it installs from the package index for minutes): the venv running
this test stands for it, linked as the copy's `.venv` and given the copy's code on
PYTHONPATH, as the editable install of setup.sh would. From the login block on, every line
is one of:
- a `prefect` command, checked against the installed Prefect's own CLI: each subcommand is
  one its `--help` lists, each flag one its `--help` of that command lists, a flag that takes
  a value has one, and no more positional arguments than its usage names;
- a `gcloud` command, checked against the installed Cloud SDK offline: the command and flags
  in its shipped completion table (data/cli/gcloud_completions.py, what gcloud's own
  completion reads), a choice flag's value among its choices, a flag's upper-case values
  (event types) among those its `--help` names, the positional count its synopsis allows;
- a file the page writes (`cat > FILE <<'EOF'`), written for real and then read as what it
  is (the webhook template renders into a Prefect event);
- `source .venv/bin/activate` or an `export` whose variables later commands use.
Anything else fails the test, so no command of the page goes unrun and unchecked.

Not checkable offline, and so not checked: that the workspace accepts the API key and the
webhook template (rendered here with Jinja as Prefect Cloud does, not sent), that `prefect
deploy` can build and push the flow image and reach the pools, that the bucket and topic
exist and the caller may configure them (gcloud creates a missing topic and grants the
Cloud Storage agent its publish role at run time), that Pub/Sub can reach the push endpoint
and that SLUG is the webhook's, and the value formats gcloud checks only on the server
(`--object-prefix`, `--push-endpoint`).
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import pytest

from flows.common.paths import REPO_ROOT
from tests.support.readme import blocks

# real `tpurl`, `prefect` and `gcloud` processes, mostly waiting on their start-up
pytestmark = [pytest.mark.services, pytest.mark.realtime]

PAGE = "how-to/deploy-prefect-cloud.md"
LOGIN = "prefect cloud login"
INSTALL = "bash scripts/setup.sh"  # the one command before the login that is not run here
VENV_BIN = Path(sys.prefix) / "bin"
HELP_ENV = {"COLUMNS": "250", "NO_COLOR": "1", "TERM": "dumb"}


def _commands(block: str) -> list[str]:
    """The block's commands as a shell reads them: continued lines joined, a heredoc kept
    with its command, blank lines and comments left out."""
    lines, out = block.splitlines(), []
    while lines:
        line = lines.pop(0)
        while line.endswith("\\") and lines:
            line = line[:-1] + lines.pop(0).strip()
        if end := re.search(r"<<'(\w+)'", line):
            body = []
            while lines and (text := lines.pop(0)) != end[1]:
                body.append(text)
            line = "\n".join([line, *body, end[1]])
        if line.strip() and not line.lstrip().startswith("#"):
            out.append(line.strip())
    return out


def _page() -> tuple[list[str], list[str]]:
    """(the blocks before the login's, the commands from the login on), in page order."""
    found = list(blocks(PAGE).items())
    login = [i for i, (_name, body) in enumerate(found) if LOGIN in _commands(body)]
    assert len(login) == 1, f"{PAGE}: {len(login)} blocks hold `{LOGIN}`"
    before = [body for _name, body in found[:login[0]]]
    after = [command for _name, body in found[login[0]:] for command in _commands(body)]
    return before, after


def _clean_checkout(root: Path) -> dict[str, str]:
    """The checkout's files (tracked and new, not ignored) copied to ``root``, with the
    test's venv as its `.venv`; the environment of a new user's shell there."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard"], cwd=REPO_ROOT, capture_output=True,
                            check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = REPO_ROOT / name
        if source.is_file() and not source.is_symlink():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, root / name)
    (root / ".venv").symlink_to(sys.prefix)
    home = root.parent / "home"
    home.mkdir()
    return {"PATH": os.environ["PATH"], "HOME": str(home), "LANG": "C.UTF-8",
            "PYTHONPATH": str(root), "CLOUDSDK_CONFIG": str(home / "gcloud")}


@dataclass
class _Help:
    """What `prefect … --help` says of one command: its subcommands (aliases included), its
    flags (each with whether it takes a value) and its positional arguments."""

    commands: set[str] = field(default_factory=set)
    flags: dict[str, bool] = field(default_factory=dict)
    positionals: list[str] = field(default_factory=list)


def _parse_help(text: str, path: tuple[str, ...]) -> _Help:
    found = _Help()
    usage = next(line for line in text.splitlines() if line.startswith("Usage:"))
    words = usage.split()[2 + len(path):]  # after "Usage: prefect" and the path itself
    found.positionals = [w for w in words if w.isupper() and w != "COMMAND"]
    panel = ""
    for line in text.splitlines():
        if line.startswith("╭─"):
            panel = line.strip("╭─╮ ").split(" ─")[0]
            continue
        if not line.startswith("│ "):
            continue
        row = line[2:].rstrip("│ ")
        if len(row) - len(row.lstrip()) >= 10:  # a description's next line
            continue
        names = re.split(r"\s{2,}", row.strip())[0].removeprefix("* ").split()
        if panel == "Commands":
            found.commands |= {n.strip("()") for n in names}
            continue
        takes_value = any(re.fullmatch(r"[A-Z]+(\.\.\.)?", n) for n in names)
        for name in names:
            if name.startswith("-"):
                found.flags[name] = takes_value and not name.startswith(("--no-", "--empty-"))
    return found


# `prefect PATH --help` for each PATH given (JSON), in one process: bin/prefect's own entry
# point (prefect.cli:app, reading sys.argv) called once per command line, each output after
# a line naming its path and ending in its exit code. One start of Prefect instead of one per
# command (each about 1.7 s here).
_HELPS = """
import json, sys
from prefect.cli import app
for path in json.loads(sys.argv[1]):
    print("\\n@@help " + json.dumps(path), flush=True)
    sys.argv = ["prefect", *path, "--help"]
    try:
        app()
        code = 0
    except SystemExit as exit:
        code = exit.code
    print("\\n@@exit " + json.dumps(code), flush=True)
"""
_helps: dict[tuple[str, ...], tuple[int, str]] = {}


def _fetch_help(paths: set[tuple[str, ...]]) -> None:
    wanted = sorted(paths - set(_helps))
    if not wanted:
        return
    done = subprocess.run([str(VENV_BIN / "python"), "-c", _HELPS, json.dumps(wanted)],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, **HELP_ENV}, check=False)
    for part in done.stdout.split("\n@@help ")[1:]:
        head, _nl, rest = part.partition("\n")
        text, _sep, code = rest.rpartition("\n@@exit ")
        _helps[tuple(json.loads(head))] = (int(json.loads(code) or 0), text)
    assert set(wanted) <= set(_helps), (done.stdout[-2000:], done.stderr[-2000:])


def _prefixes(command: str) -> set[tuple[str, ...]]:
    """Every path the command's words could name: () and each run of its words after
    prefect's own flags, up to the first flag of the command."""
    tokens = shlex.split(command)[1:]
    while tokens and tokens[0].startswith("-"):
        tokens.pop(0)
    words = list(itertools.takewhile(lambda token: not token.startswith("-"), tokens))
    return {tuple(words[:n]) for n in range(len(words) + 1)}


def _prefect_help(path: tuple[str, ...]) -> _Help:
    _fetch_help({path})
    code, text = _helps[path]
    assert code == 0, (path, text[-2000:])
    return _parse_help(text, path)


def _flag_problems(tokens: list[str], flags: dict[str, bool], where: str) -> tuple[list[str],
                                                                                list[str]]:
    """(problems, positionals) of the tokens against a command's flags."""
    problems, positionals = [], []
    while tokens:
        token = tokens.pop(0)
        if not token.startswith("-"):
            positionals.append(token)
            continue
        name, has_value, _value = token.partition("=")
        if name not in flags:
            problems.append(f"{where}: {name} is not a flag it takes")
        elif flags[name] and not has_value and (not tokens or tokens[0].startswith("-")):
            problems.append(f"{where}: {name} takes a value and has none")
        elif flags[name] and not has_value:
            tokens.pop(0)
        elif not flags[name] and has_value:
            problems.append(f"{where}: {name} takes no value")
    return problems, positionals


def prefect_problems(command: str) -> list[str]:
    """What the installed Prefect's CLI would refuse in the command line, by its --help."""
    _fetch_help(_prefixes(command))
    tokens = shlex.split(command)[1:]
    root = _prefect_help(())
    problems: list[str] = []
    while tokens and tokens[0].startswith("-"):  # prefect's own flags (--no-prompt)
        flag, *tokens = tokens
        problems += _flag_problems([flag], root.flags, "prefect")[0]
    path: tuple[str, ...] = ()
    while tokens and tokens[0] in _prefect_help(path).commands and (*path, tokens[0]) in _helps:
        path += (tokens.pop(0),)
    if not path:
        return [*problems, f"prefect has no command {tokens[:1]}"]
    where = "prefect " + " ".join(path)
    help_ = _prefect_help(path)
    found, positionals = _flag_problems(tokens, help_.flags, where)
    if len(positionals) > len(help_.positionals):
        found.append(f"{where}: {len(positionals)} arguments {positionals}; its usage names "
                     f"{help_.positionals or 'none'} (or an unknown subcommand)")
    return problems + found


@cache
def _gcloud_tree() -> dict:
    gcloud = shutil.which("gcloud")
    if gcloud is None:
        pytest.skip("gcloud is not installed: the page's gcloud commands are not checked")
    table = Path(gcloud).resolve().parents[1] / "data/cli/gcloud_completions.py"
    if not table.is_file():
        pytest.skip(f"this Cloud SDK has no completion table ({table})")
    spec = importlib.util.spec_from_file_location("gcloud_completions", table)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.STATIC_COMPLETION_CLI_TREE


@cache
def _gcloud_help(path: tuple[str, ...], config: str) -> str:
    env = {"PATH": os.environ["PATH"], "HOME": config, "CLOUDSDK_CONFIG": config}
    done = subprocess.run(["gcloud", *path, "--help"], capture_output=True, text=True,
                          timeout=60, env={**env, **HELP_ENV, "PAGER": "cat"}, check=False)
    assert done.returncode == 0, (path, done.stderr)
    return re.sub(r"\x1b\[[0-9;]*m", "", done.stdout)


def gcloud_problems(command: str, env: dict[str, str]) -> list[str]:
    """What the installed gcloud would refuse in the command line, as far as its completion
    table and its --help tell offline."""
    tree = _gcloud_tree()
    tokens = shlex.split(command)[1:]
    node, path = tree, ()
    while tokens and tokens[0] in node["commands"]:
        path += (tokens[0],)
        node = node["commands"][tokens.pop(0)]
    where = "gcloud " + " ".join(path)
    if node["commands"] or not path:
        return [f"{where}: not a command (it has subcommands: {sorted(node['commands'])[:8]})"]
    flags = {**tree["flags"], **node["flags"]}
    problems, positionals = _flag_problems(
        list(tokens), {name: kind != "bool" for name, kind in flags.items()}, where)
    text = _gcloud_help(path, env["CLOUDSDK_CONFIG"])
    synopsis = text.split("SYNOPSIS", 1)[1].strip().splitlines()[0]
    named = synopsis.removeprefix(where).split()
    required = []
    for word in named:  # the positional names, up to the first optional part or flag
        if not re.fullmatch(r"[A-Z][A-Z_]*", word):
            break
        required.append(word)
    if len(positionals) < len(required) or (len(positionals) > len(required)
                                            and "..." not in synopsis):
        problems.append(f"{where}: {len(positionals)} arguments; its synopsis: {synopsis}")
    for token in tokens:
        name, _eq, value = token.partition("=")
        kind = flags.get(name)
        if isinstance(kind, list) and value and value not in kind:
            problems.append(f"{where}: {name}={value} is not one of {kind}")
        for word in re.findall(r"\b[A-Z][A-Z_]{3,}\b", re.sub(r"\$\w+", "", value)):
            if word not in text:
                problems.append(f"{where}: {name}: {word} is not a value its --help names")
    return problems


def _webhook_event(template: str) -> dict:
    """The event the webhook template makes of a GCS notification pushed by Pub/Sub (the
    wrapped body), rendered with Jinja's sandbox as Prefect Cloud renders templates, and
    read by Prefect's own Event model."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    from prefect.events import Event

    body = {"message": {"attributes": {"bucketId": "corp-data",
                                       "objectId": "datasets/openmath-v8.parquet"}}}
    event = json.loads(ImmutableSandboxedEnvironment().from_string(template).render(body=body))
    Event.model_validate({**event, "id": "3f1c1e7a-8a35-4a5e-9b53-2f7c3c1e9a10",
                          "occurred": "2026-12-05T06:00:00Z"})
    return event


def _run_before_login(before: list[str], root: Path, env: dict[str, str]) -> list[str]:
    """Every block before the login's, for real and in order (their outputs), but the
    install, which must be exactly setup.sh."""
    install = [b for b in before if INSTALL in _commands(b)]
    assert [_commands(b) for b in install] == [[INSTALL]], install
    assert (root / "scripts/setup.sh").is_file()
    outputs = []
    for block in before:
        if block in install:
            continue
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=root, env=env,
                              text=True, capture_output=True, timeout=120, check=False)
        assert done.returncode == 0, (block, done.stdout[-3000:], done.stderr[-3000:])
        outputs.append(done.stdout)
    return outputs


def test_the_cloud_page_runs_as_written_up_to_the_login_and_its_later_commands_exist(
        tmp_path: Path) -> None:
    root = tmp_path / "checkout"
    env = _clean_checkout(root)
    before, after = _page()
    with ThreadPoolExecutor(1) as beside:  # the page's Prefect helps, at once, while it runs
        helps = beside.submit(_fetch_help, {path for command in after
                                            if command.startswith("prefect ")
                                            for path in _prefixes(command)})
        outputs = _run_before_login(before, root, env)
        helps.result()
    said = "\n".join(outputs)
    assert "profile qwen3-30b-a3b-v6e-32 is valid (backend gke)" in said, said[-2000:]
    assert "ct6e-standard-4t 4x8 x1 = 32 chips" in said, said[-2000:]


    # From the login on: each line run (a file it writes), checked, or refused here.
    exported: set[str] = set()
    written: dict[str, str] = {}
    checked, problems = [], []
    for command in after:
        words = shlex.split(command.splitlines()[0])
        used = set(re.findall(r"\$(\w+)", command)) - {"cat"}
        files = re.findall(r"\$\(cat (\S+)\)", command)
        problems += [f"{command[:60]}: ${name} is exported by no earlier line"
                     for name in used if name not in exported]
        problems += [f"{command[:60]}: {name} is written by no earlier line"
                     for name in files if name not in written]
        if words[0] == "prefect":
            problems += prefect_problems(command)
        elif words[0] == "gcloud":
            problems += gcloud_problems(command, env)
        elif words[:2] == ["source", ".venv/bin/activate"]:
            continue
        elif words[0] == "export":
            exported |= {word.partition("=")[0] for word in words[1:]}
            continue
        elif words[0] == "cat" and words[1] == ">":
            done = subprocess.run(["bash", "-euo", "pipefail", "-c", command], cwd=root,
                                  env=env, capture_output=True, text=True, check=False)
            assert done.returncode == 0, (command, done.stderr)
            written[words[2]] = (root / words[2]).read_text()
        else:
            problems.append(f"{command[:60]}: neither run nor checked by this test")
            continue
        checked.append(words[0])
    assert not problems, "\n".join(problems)
    assert checked.count("prefect") >= 6 and checked.count("gcloud") == 2, checked
    assert LOGIN in after

    event = _webhook_event(written["webhook.json"])
    assert event["event"] == "tpurl.dataset.updated"
    assert event["payload"] == {"uri": "gs://corp-data/datasets/openmath-v8.parquet"}


PREFECT_REFUSED = [
    ("prefect cloud webhook create x --templat '{}'", "--templat is not a flag it takes"),
    ("prefect cloud webhook create x --template", "--template takes a value and has none"),
    ("prefect cloud webhooks creat x", "arguments ['creat', 'x']"),
    ("prefect --no-prompt deploy --name a --all --nope", "--nope is not a flag"),
]
GCLOUD_REFUSED = [
    ("gcloud storage buckets notifications create gs://b --topic=t --event-type=OBJECT_FINALIZE",
     "--event-type is not a flag"),
    ("gcloud storage buckets notifications create gs://b --payload-format=xml",
     "--payload-format=xml is not one of"),
    ("gcloud storage buckets notifications create gs://b --event-types=OBJECT_CREATE",
     "OBJECT_CREATE is not a value"),
    ("gcloud pubsub subscriptions create --topic=t", "0 arguments"),
    ("gcloud pubsub subscription create s --topic=t", "not a command"),
]


def test_a_command_prefect_would_refuse_is_named() -> None:
    """The check is Prefect's help, not a list of our own: a misspelt flag, a missing
    value or an unknown subcommand is found (their helps fetched in one process)."""
    _fetch_help({path for command, _problem in PREFECT_REFUSED for path in _prefixes(command)})
    for command, problem in PREFECT_REFUSED:
        found = prefect_problems(command)
        assert any(problem in p for p in found), (command, found)


def test_a_command_gcloud_would_refuse_is_named(tmp_path: Path) -> None:
    env = {"CLOUDSDK_CONFIG": str(tmp_path)}
    for command, problem in GCLOUD_REFUSED:
        found = gcloud_problems(command, env)
        assert any(problem in p for p in found), (command, found)
