"""The Cloud Build image stage's clients from Application Default Credentials, as a user's
machine or a flow pod gives them: a service-account key whose tokens come from a local token
endpoint (tests/fakes/oauth_token.py), or none at all."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from flows.backends.gke.image import cloudbuild
from flows.backends.gke.image.errors import ImageError
from flows.common.failure_codes import Failure
from flows.core.redaction import redact
from tests.fakes.adc_key import key_identity, write_adc_key
from tests.fakes.oauth_token import token_endpoint


def test_the_registry_token_is_the_credentials_own_and_is_redacted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The registry's token flow gets a token refreshed from the key (google-auth's
    jwt-bearer grant against the key's token_uri), and from then on that token, in any of
    its forms, is cut out of every text the pipeline writes."""
    with token_endpoint() as endpoint:
        key = write_adc_key(tmp_path / "adc.json", project="my-proj", token_uri=endpoint.url)
        endpoint.know(*key_identity(key))
        monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(key))
        clients = cloudbuild.default_clients("my-proj")
        assert clients.registry_token is not None
        token = clients.registry_token()
        assert token is not None and token == endpoint.issued[-1]
        assert clients.storage.project == "my-proj"
    basic = base64.b64encode(f"oauth2accesstoken:{token}".encode()).decode()
    assert basic not in redact(f"Authorization: Basic {basic}")


def test_without_credentials_the_stage_is_refused_naming_how_to_get_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No key, no gcloud login, not on Google Cloud (google-auth's NO_GCE_CHECK skips the
    metadata server it would otherwise ask): the image stage stops before any build, with
    its failure code and the two ways to give it credentials."""
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "no-gcloud"))
    monkeypatch.setenv("NO_GCE_CHECK", "True")
    with pytest.raises(ImageError) as refused:
        cloudbuild.default_clients("my-proj")
    assert refused.value.code == Failure.IMAGE_NO_GOOGLE_CREDENTIALS
    assert "no Google credentials for Cloud Build" in str(refused.value)
    assert "gcloud auth application-default login" in (refused.value.fix or "")
