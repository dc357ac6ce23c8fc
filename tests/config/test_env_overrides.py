"""TPURL_ variables and the profile: a top-level field is set by TPURL_<FIELD>, a misspelt
override is refused naming the variable and the field it is closest to, and none of the
TPURL_ variables the code itself uses (the tooling's) is taken for one."""

from __future__ import annotations

import re
import subprocess

import pytest

from flows.common.paths import REPO_ROOT
from flows.config import ProfileError, load_profile
from flows.config.env_overrides import env_name
from tests.support.profiles import TUTORIAL_REQUIRED

TUTORIAL = "qwen3-30b-a3b-v6e-32"
ENV_REQUIRED = {env_name(k): v for k, v in TUTORIAL_REQUIRED.items()}


def test_a_top_level_field_is_set_from_the_environment():
    profile = load_profile("rehearsal", environ={"TPURL_FLOW_TIMEOUT_S": "7200"})
    assert profile.flow_timeout_s == 7200
    assert load_profile("rehearsal", {"flow_timeout_s": "60"},  # the CLI still wins
                        environ={"TPURL_FLOW_TIMEOUT_S": "7200"}).flow_timeout_s == 60


@pytest.mark.parametrize(("variable", "meant"), [
    ("TPURL_FLOW_TIMEOUT", "TPURL_FLOW_TIMEOUT_S (the field flow_timeout_s)"),
    ("TPURL_GKE_PROJECT", "TPURL_GKE__PROJECT (the field gke.project)"),
    ("TPURL_LOCAL_ROOT", "TPURL_LOCAL__ROOT (the field local.root)"),
])
def test_a_misspelt_override_is_refused_naming_the_variable_and_the_field(variable, meant):
    with pytest.raises(ProfileError) as caught:
        load_profile("rehearsal", environ={variable: "x"})
    [issue] = caught.value.issues
    assert issue.field == variable and "sets no profile field" in issue.problem
    assert issue.fix.startswith(f"did you mean {meant}?"), issue.fix


def test_a_misspelt_section_path_is_refused_by_validation():
    with pytest.raises(ProfileError, match=r"local\.rot: is not a known field"):
        load_profile("rehearsal", environ={"TPURL_LOCAL__ROT": "x"})


def _tpurl_names_in_the_code() -> list[str]:
    """Every TPURL_ name the code reads or sets (`git grep -hoE "TPURL_[A-Z0-9_]+"` over
    flows, scripts, images, tests and prefect.yaml)."""
    found = subprocess.run(["git", "grep", "-hoE", r"TPURL_[A-Z0-9_]+", "--", "flows",
                            "scripts", "images", "tests", "prefect.yaml",
                            # the misspellings these two name on purpose, as examples
                            ":(exclude)tests/config/test_env_overrides.py",
                            ":(exclude)tests/config/test_newcomer_mistakes.py",
                            ":(exclude)flows/config/env_overrides.py"],
                           cwd=REPO_ROOT, capture_output=True, text=True, check=True).stdout
    return sorted({n for n in found.split() if not re.fullmatch(r"TPURL_[A-Z_]*__[A-Z_]*", n)
                   and n != "TPURL_"})


def test_no_tpurl_variable_the_code_uses_is_taken_for_a_misspelt_override():
    names = _tpurl_names_in_the_code()
    assert {"TPURL_FLOW_IMAGE", "TPURL_CACHE_DIR", "TPURL_INSTALLER",
            "TPURL_GCLUSTER_BUNDLE"} <= set(names), names
    tooling = {n: "1" for n in names if n != "TPURL_FLOW_TIMEOUT_S"}
    assert load_profile("rehearsal", environ=tooling).flow_timeout_s is None
    tutorial = load_profile(TUTORIAL, environ={**ENV_REQUIRED, **tooling})
    assert tutorial.gke is not None and tutorial.gke.project == TUTORIAL_REQUIRED["gke.project"]
