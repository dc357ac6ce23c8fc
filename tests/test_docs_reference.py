"""The reference pages are what the code renders now: a change of the CLI,
a profile field, prefect.yaml, a failure code or a file format that is not regenerated
(`python -m reference`) fails here, naming the page."""

from __future__ import annotations

import difflib

import pytest

from reference import profile_page
from reference.pages import PAGES, REFERENCE_DIR


@pytest.mark.parametrize("name", sorted(PAGES))
def test_the_committed_page_is_what_the_code_renders(name: str) -> None:
    committed = (REFERENCE_DIR / name).read_text()
    rendered = PAGES[name]()
    diff = "".join(difflib.unified_diff(committed.splitlines(True), rendered.splitlines(True),
                                        f"docs/reference/{name} (committed)", "rendered", n=1))
    assert committed == rendered, (f"docs/reference/{name} drifted from the code; run "
                                   f"`.venv/bin/python -m reference`:\n{diff[:4000]}")


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


def test_what_an_unset_field_means_names_optional_fields_that_default_to_nothing() -> None:
    """The profile page's "unset: …" texts belong to fields that exist and whose model
    default is None (else the page would hide a real default behind a computed one)."""
    from reference.profile_page import _default, rows, unset_means

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


def test_the_stage_picture_places_each_program_where_the_runtime_does() -> None:
    from reference.diagrams import example_profile, stages_diagram
    from tests.support.profiles import tutorial_profile

    drawn = "\n".join(stages_diagram(example_profile("qwen3-30b-a3b-v6e-32")))
    assert 'g_convert["GKE: one pod on the CPU pool (cpu-np)"]:::cpu' in drawn
    assert "g_train[\"GKE: Pathways head on the CPU pool (cpu-np), workers on the TPU slice " \
           "(4x8, 32 chips)\"]:::pathways" in drawn
    # conversion on the slice's hosts (render.py tpu_hosts_jobset, leader only) is drawn there
    on_hosts = "\n".join(stages_diagram(tutorial_profile(**{
        "gke.conversion_placement": "tpu-hosts"})))
    assert 'g_convert["GKE: every host of the TPU slice (4x8), only the first working"]' \
        in on_hosts
    assert "export -. with an eval section .-> evaluate" in drawn


def test_the_billing_picture_draws_the_profiles_timeline_billed_as_is_billed_says() -> None:
    from reference.diagrams import billing_diagram
    from tests.support.profiles import smoke_profile

    drawn = billing_diagram(smoke_profile(**{"gke.train_timeline.scale_up": "0",
                                             "gke.train_timeline.steps": "7",
                                             "gke.max_usd_per_run": "20"}))
    text = "\n".join(drawn)
    assert "s_scale_up" not in text  # a phase of no minutes draws no bar
    assert "    steps :crit, s_steps, after s_first_compiles, 420s" in drawn
    # the head's image pull: unbilled on spot or on-demand, billed when the slice is queued
    assert "    image_pull :done, s_image_pull, 00:00, 1200s" in drawn
    assert "    image_pull :crit, q_image_pull, 00:00, 1200s" in drawn


def test_the_queue_picture_gives_each_of_two_teams_its_queues_in_one_cohort() -> None:
    from flows.backends.gke.infra.kueue_objects import KUEUE_TEMPLATE, kueue_documents
    from flows.backends.gke.infra.team_quota import checked_quotas
    from flows.config.teams import Teams
    from reference.diagrams import queues_diagram
    from tests.support.profiles import tutorial_profile

    gke = tutorial_profile().gke
    assert gke is not None
    teams = Teams.model_validate({"teams": {
        "a": {"name": "a", "usd_per_month": 10, "profiles": ["x"], "tpu_chips": 32,
              "borrowing_limit_chips": 0},
        "b": {"name": "b", "usd_per_month": 10, "profiles": ["y"]}}})
    quotas = checked_quotas(teams, gke.total_chips + 1, {})
    drawn = "\n".join(queues_diagram(kueue_documents(KUEUE_TEMPLATE.read_text(), gke, quotas),
                                     teams))
    assert "lq_team_a --> cq_team_a" in drawn and "lq_team_b --> cq_team_b" in drawn
    assert "p_a --> lq_team_a" in drawn and "p_none --> lq_user_queue" in drawn
    cohort = drawn.split('subgraph cohort_tpurl_v6e ["cohort tpurl-v6e: idle chips lent"]')[1]
    cohort = cohort.split("  end")[0]
    assert "guaranteed 32 chips per TPU flavor, may borrow 0" in cohort
    assert "ClusterQueue team-b<br/>guaranteed 1 chips per TPU flavor, may borrow 32" in cohort
    assert "cluster-queue" not in cohort
