"""An MLflow address with a credential in it (``user:password@``, ``token@``, ``?token=``) is
refused when the profile is read, naming the field and the fix, and the credential is in none
of what the refusal reaches: the message, the log and `tpurl validate`'s output."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from flows.common.paths import PROFILES_DIR
from flows.config import ProfileError, load_profile
from flows.integrations.reporting import report


def _secret() -> str:
    """A credential as random as a real one (a wordy one could match ordinary text)."""
    return "Q" + os.urandom(12).hex()


ADDRESSES = {
    "user-and-password": "https://alice:{secret}@mlflow.corp/",
    "token-as-user": "http://{secret}@mlflow.corp:5000",
    "query-token": "https://mlflow.corp/?token={secret}",
    "query-token-without-path": "http://mlflow.corp?access_token={secret}",
    "fragment": "https://mlflow.corp/#key={secret}",
}
FIELDS = ("tracking.mlflow.tracking_uri", "promotion.register.mlflow.tracking_uri")


@pytest.mark.parametrize("field", FIELDS)
@pytest.mark.parametrize("shape", list(ADDRESSES))
def test_an_address_with_a_credential_is_refused_naming_the_field_and_never_quoting_it(
        field: str, shape: str) -> None:
    secret = _secret()
    overrides = {field: ADDRESSES[shape].format(secret=secret), "eval.batches": "4"}
    if field.startswith("promotion."):
        overrides["promotion.register.mlflow.model_name"] = "qwen3-grpo"
    with pytest.raises(ProfileError) as raised:
        load_profile("rehearsal", overrides, environ={})
    [issue] = raised.value.issues
    assert issue.field == field
    assert "MLFLOW_TRACKING_TOKEN" in issue.fix and "MLFLOW_TRACKING_PASSWORD" in issue.fix
    assert "mlflow.corp" in issue.problem  # the address is still recognisable
    assert secret not in str(raised.value) and secret not in repr(raised.value.issues)


def test_validate_refuses_a_profile_file_with_a_password_in_the_address_without_printing_it(
        tmp_path: Path) -> None:
    secret = _secret()
    profile = tmp_path / "mine.yaml"
    profile.write_text((PROFILES_DIR / "rehearsal.yaml").read_text().replace(
        "\nname: rehearsal\n", "\n")
                       + f"\ntracking:\n  mlflow:\n    tracking_uri: https://ci-bot:{secret}"
                         "@mlflow.corp\n")
    done = subprocess.run([str(Path(sys.executable).with_name("tpurl")), "validate",
                           str(profile)], capture_output=True, text=True, timeout=120,
                          check=False, env={**os.environ, "TPURL_KEEP_API_S": "0"})
    assert done.returncode == 2, done.stderr
    assert "tracking.mlflow.tracking_uri" in done.stderr
    assert "MLFLOW_TRACKING_TOKEN" in done.stderr
    assert secret not in done.stdout + done.stderr


def test_a_report_whose_error_quotes_an_address_with_credentials_logs_it_blanked(
        caplog: pytest.LogCaptureFixture) -> None:
    """What an HTTP library says when a server does not answer quotes the address it was
    given: a credential in an address that did not come from the profile (MLflow's own
    MLFLOW_TRACKING_URI, a redirect) is blanked in the warning all the same."""
    secret, token = _secret(), _secret()

    def failing() -> None:
        raise ConnectionError(f"Max retries exceeded with url: https://bot:{secret}@mlflow.corp"
                              f"/api/2.0/mlflow/runs/create?token={token}")

    with caplog.at_level(logging.WARNING):
        assert report("MLflow tracking", failing, 1) is None
    [record] = caplog.records
    assert "mlflow.corp" in record.getMessage()
    assert secret not in caplog.text and token not in caplog.text
