"""load_yaml (flows/common/yaml_text.py): libyaml's parser where PyYAML has it, the same data
as yaml.safe_load, and on a syntax error the pure parser's message, snippet and all."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from flows.common.paths import PROFILES_DIR, REPO_ROOT
from flows.common.yaml_text import load_yaml

SHIPPED = [*sorted(PROFILES_DIR.glob("*.yaml")), REPO_ROOT / "images/post-training/patches.yaml",
           REPO_ROOT / "prefect.yaml"]


def test_libyaml_is_there() -> None:
    """The wheels PyPI serves for our Pythons carry it; without it this module is no faster."""
    assert yaml.__with_libyaml__


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_the_shipped_files_read_as_safe_load_reads_them(path: Path) -> None:
    text = path.read_text()
    assert load_yaml(text) == yaml.safe_load(text)


@pytest.mark.parametrize("text", [
    "on: yes\noff: no\nversion: 1.10\nport: 0o17\nwhen: 2026-12-04\nempty:\nnull_: ~\n",
    "a: &x [1, 2]\nb: *x\n'quoted: key': \"tab\\there\"\n",
    "text: |\n  two\n  lines\nfolded: >\n  one\n  line\n",
])
def test_resolved_scalars_are_the_same(text: str) -> None:
    assert load_yaml(text) == yaml.safe_load(text)


@pytest.mark.parametrize("text", ["a: [1, 2\n", "a: b: c\n", "key: 'open\n", "- a\nb: c\n",
                                  "a: !!python/object:os.system x\n"])
def test_an_error_is_the_pure_parsers_with_its_snippet(text: str) -> None:
    with pytest.raises(yaml.YAMLError) as pure:
        yaml.safe_load(text)
    with pytest.raises(yaml.YAMLError) as ours:
        load_yaml(text)
    assert str(ours.value) == str(pure.value)
