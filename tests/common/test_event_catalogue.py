"""The event catalogue is the one list of `tpurl.*` events: the emitters take
their names from it and their payloads pass its key check, and every trigger the repository
ships expects an event it lists. docs/reference/events.md is rendered from it
(tests/test_docs_reference.py checks the committed page)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import yaml

from flows.common import event_catalogue
from flows.common.event_catalogue import BY_NAME, CATALOGUE, EventPayloadError
from flows.common.paths import REPO_ROOT


def _expected_events(document: object) -> list[str]:
    """Every `expect` entry of the triggers in a YAML document (prefect.yaml, automations)."""
    found: list[str] = []
    if isinstance(document, dict):
        expect = document.get("expect")
        if isinstance(expect, list):
            found += [name for name in expect if isinstance(name, str)]
        for value in document.values():
            found += _expected_events(value)
    elif isinstance(document, list):
        for value in document:
            found += _expected_events(value)
    return found


def _flows_trees() -> list[tuple[str, ast.AST]]:
    catalogue = Path(event_catalogue.__file__).resolve()
    return [(str(path.relative_to(REPO_ROOT)), ast.parse(path.read_text(), str(path)))
            for path in sorted((REPO_ROOT / "flows").rglob("*.py"))
            if path.resolve() != catalogue]


def test_event_names_are_written_only_in_the_catalogue() -> None:
    elsewhere = [f"{where}: {node.value}" for where, tree in _flows_trees()
                 for node in ast.walk(tree)
                 if isinstance(node, ast.Constant) and node.value in BY_NAME]
    assert elsewhere == []


def test_every_emit_event_takes_its_name_from_the_catalogue() -> None:
    """`emit_event(event=KIND.name, ...)`: a literal or an f-string there is an event the
    catalogue (and so the reference page) does not know."""
    calls = [(where, call) for where, tree in _flows_trees() for call in ast.walk(tree)
             if isinstance(call, ast.Call) and getattr(call.func, "id", "") == "emit_event"]
    assert len(calls) >= 4, "the emitters were not found: the search is broken"
    for where, call in calls:
        [event] = [k.value for k in call.keywords if k.arg == "event"]
        assert isinstance(event, ast.Attribute) and event.attr == "name", (
            f"{where}:{call.lineno}: emit_event(event=...) must be a catalogue entry's .name")


def test_every_shipped_trigger_expects_a_catalogued_event() -> None:
    files = [REPO_ROOT / "prefect.yaml", *sorted((REPO_ROOT / "deployments" / "automations")
                                                 .glob("*.yaml"))]
    expected = [name for path in files for name in _expected_events(yaml.safe_load(
        path.read_text())) if name.startswith("tpurl.")]
    assert expected, "no trigger expects a tpurl event: the search is broken"
    assert set(expected) <= set(BY_NAME)


@pytest.mark.parametrize("kind", CATALOGUE, ids=lambda kind: kind.name)
def test_a_payload_with_the_catalogued_keys_passes_and_any_other_is_refused(kind) -> None:
    required = dict.fromkeys(kind.required, "x")
    assert kind.checked(required) == required
    full = {**required, **dict.fromkeys(kind.optional, "y")}
    assert kind.checked(full) == full
    with pytest.raises(EventPayloadError, match=re.escape(kind.name) + r".*not catalogued "
                       r"\['surprise'\]"):
        kind.checked({**required, "surprise": 1})
    if kind.required:
        with pytest.raises(EventPayloadError, match=rf"missing \['{kind.required[0]}'\]"):
            kind.checked({key: "x" for key in kind.required[1:]})


def test_names_are_unique_and_each_says_when_it_fires() -> None:
    assert len(BY_NAME) == len(CATALOGUE)
    assert all(kind.when and kind.emitter and (REPO_ROOT / kind.emitter).is_file()
               for kind in CATALOGUE)
