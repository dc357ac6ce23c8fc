"""The reference pages are what the code renders now: a change of the CLI,
a profile field, prefect.yaml, a failure code or a file format that is not regenerated
(`python -m flows.reference`) fails here, naming the page."""

from __future__ import annotations

import difflib

import pytest

from flows.reference import failures_page, profile_page
from flows.reference.pages import PAGES, REFERENCE_DIR


@pytest.mark.parametrize("name", sorted(PAGES))
def test_the_committed_page_is_what_the_code_renders(name: str) -> None:
    committed = (REFERENCE_DIR / name).read_text()
    rendered = PAGES[name]()
    diff = "".join(difflib.unified_diff(committed.splitlines(True), rendered.splitlines(True),
                                        f"docs/reference/{name} (committed)", "rendered", n=1))
    assert committed == rendered, (f"docs/reference/{name} drifted from the code; run "
                                   f"`.venv/bin/python -m flows.reference`:\n{diff[:4000]}")


def test_every_profile_field_is_on_the_profile_page() -> None:
    from flows.config import Profile

    page = (REFERENCE_DIR / "profile.md").read_text()
    for name in Profile.model_fields:
        assert f"| `{name}` |" in page


def test_a_field_docstring_becomes_its_description() -> None:
    rows = {row.path: row for row in profile_page.rows()}
    assert set(rows) >= {"name", "backend", "gke.project", "local.venv", "model.hf_token.env"}
    from pydantic import BaseModel, ConfigDict

    class Example(BaseModel):
        model_config = ConfigDict(use_attribute_docstrings=True)
        knob: int = 3
        """What the knob turns."""

    (row,) = profile_page.rows(Example)
    assert (row.path, row.type, row.default, row.description) == ("knob", "int", "`3`",
                                                                  "What the knob turns.")


def test_every_failure_code_found_is_listed_with_where_it_is_set(tmp_path) -> None:
    module = tmp_path / "flows" / "x.py"
    module.parent.mkdir()
    module.write_text('A = "image/new-cause"\nB = "application/json"\nC = "gke/"\n')
    assert set(failures_page.codes_in(tmp_path / "flows")) == {"image/new-cause"}


def test_what_an_unset_field_means_names_optional_fields_that_default_to_nothing() -> None:
    """The profile page's "unset: …" texts belong to fields that exist and whose model
    default is None (else the page would hide a real default behind a computed one)."""
    from flows.reference.profile_page import _default, rows, unset_means

    paths = {row.path: row for row in rows()}
    for path, text in unset_means().items():
        assert path in paths, f"{path}: no such profile field"
        assert paths[path].default == text
    from flows.config.profile import Profile

    for path in unset_means():
        model: type = Profile
        *parents, leaf = path.split(".")
        for part in parents:  # the section's model inside its `X | None`
            optional = model.model_fields[part].annotation
            model = next(a for a in optional.__args__ if a is not type(None))
        assert _default(model.model_fields[leaf]) == "", path  # None: nothing but computed
