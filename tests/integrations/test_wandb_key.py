"""W&B API keys of both formats (legacy: 40 hex digits; current: wandb_v1_ and 77 more) are
taken, exactly as the pinned wandb takes them, and what wandb would refuse is refused before
the first stage; a key of either format written where its reference belongs is refused at
load without being quoted."""

from __future__ import annotations

import os
import secrets
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from wandb.sdk.lib.wbauth.validation import check_api_key

from flows.config import ProfileError, load_profile
from flows.config.wandb_key import looks_like_wandb_key, wandb_key_problem
from flows.core.redaction import redact
from flows.integrations.preflight import integration_issues

ALNUM = string.ascii_letters + string.digits


def legacy_key() -> str:
    return os.urandom(20).hex()


def current_key() -> str:
    """The format W&B issues now: 86 characters, wandb_v1_ then letters and digits."""
    return "wandb_v1_" + "".join(secrets.choice(ALNUM) for _ in range(77))


def _jwt() -> str:
    return ".".join(secrets.token_urlsafe(24) for _ in range(3))


ACCEPTED = {"legacy": legacy_key, "current": current_key,
            "on-prem": lambda: "local-" + legacy_key(), "jwt": _jwt}
REFUSED = {"empty": "", "short": "0123456789abcdef", "39": "a" * 39,
           "space": legacy_key()[:20] + " " + legacy_key()[:20],
           "newline": legacy_key() + "\n", "quoted": f'"{legacy_key()}"',
           "bearer": f"Bearer {current_key()}", "url": "https://wandb.ai/authorize"}


@pytest.mark.parametrize("kind", list(ACCEPTED))
def test_both_formats_and_wandbs_other_forms_are_taken(kind: str) -> None:
    key = ACCEPTED[kind]()
    assert check_api_key(key) is None  # what the pinned wandb says
    assert wandb_key_problem(key) is None


@pytest.mark.parametrize("kind", list(REFUSED))
def test_what_wandb_refuses_is_refused_without_quoting_it(kind: str) -> None:
    value = REFUSED[kind]
    assert check_api_key(value) is not None
    problem = wandb_key_problem(value)
    assert problem is not None and (not value.strip() or value.strip() not in problem)


KEYISH = st.lists(st.sampled_from([*"0123456789abcdefABZ_-. é\n", "wandb_v1_", "local-"]),
                  max_size=90).map("".join)


@settings(max_examples=400, deadline=None)
@given(KEYISH)
def test_the_check_agrees_with_wandbs_own_on_any_text(text: str) -> None:
    assert (wandb_key_problem(text) is None) == (check_api_key(text) is None)


@pytest.mark.parametrize("kind", ["legacy", "current"])
def test_the_preflight_takes_a_key_of_either_format(kind: str) -> None:
    profile = load_profile("rehearsal", {"tracking.wandb.project": "grpo",
                                         "tracking.wandb.api_key.env": "WB_KEY"})
    assert integration_issues(profile, environ={"WB_KEY": ACCEPTED[kind]()}) == []


@pytest.mark.parametrize("value", ["0123456789abcdef", "a" * 39, "not a key at all, a sentence"])
def test_the_preflight_refuses_a_value_wandb_would_refuse_naming_the_field(value: str) -> None:
    profile = load_profile("rehearsal", {"tracking.wandb.project": "grpo",
                                         "tracking.wandb.api_key.env": "WB_KEY"})
    [issue] = integration_issues(profile, environ={"WB_KEY": value})
    assert issue.field == "tracking.wandb.api_key"
    assert issue.category == "config/secret-invalid"
    assert "wandb.ai/authorize" in issue.fix and "WB_KEY" in issue.problem
    assert value not in issue.problem + issue.fix


@pytest.mark.parametrize("kind", ["legacy", "current"])
@pytest.mark.parametrize("where", ["env", "gcp_secret"])
def test_a_key_written_where_its_reference_belongs_is_refused_unquoted(kind: str,
                                                                      where: str) -> None:
    key = ACCEPTED[kind]()
    with pytest.raises(ProfileError) as raised:
        load_profile("rehearsal", {"tracking.wandb.project": "grpo",
                                   f"tracking.wandb.api_key.{where}": key}, environ={})
    assert any(i.field == "tracking.wandb.api_key" and "revoke it" in i.problem
               for i in raised.value.issues), raised.value.issues
    assert key not in str(raised.value)


def test_a_long_variable_name_is_a_name_not_a_key() -> None:
    name = "WANDB_API_KEY_OF_THE_PRODUCTION_TEAM_ACCOUNT"  # wandb's rule alone would take it
    assert check_api_key(name) is None and not looks_like_wandb_key(name)
    profile = load_profile("rehearsal", {"tracking.wandb.project": "grpo",
                                         "tracking.wandb.api_key.env": name}, environ={})
    assert profile.tracking.wandb.api_key.env == name


def test_a_current_format_key_printed_anywhere_is_blanked_in_logs() -> None:
    key = current_key()
    assert key not in redact(f"wandb: using key {key} for entity my-team")
