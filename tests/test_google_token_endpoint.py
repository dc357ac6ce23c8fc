"""The stand-in of Google's token endpoint (tests/fakes/oauth_token.py) answers google-auth's
own refresh, and refuses what the real endpoint refuses: a grant signed by another key, from
an account it does not know, or expired."""

from __future__ import annotations

import json
import time
import urllib.parse
from pathlib import Path

import pytest
from google.auth import jwt
from google.auth.exceptions import RefreshError
from google.auth.transport.requests import Request
from google.oauth2 import service_account

from tests.fakes.adc_key import key_identity, write_adc_key
from tests.fakes.oauth_token import grant_problem, token_endpoint


def _credentials(path: Path) -> service_account.Credentials:
    return service_account.Credentials.from_service_account_file(
        str(path), scopes=["https://www.googleapis.com/auth/devstorage.read_write"])


def test_google_auth_refreshes_with_the_known_key_and_is_refused_otherwise(tmp_path: Path):
    with token_endpoint() as endpoint:
        known = write_adc_key(tmp_path / "known.json", token_uri=endpoint.url)
        endpoint.know(*key_identity(known))
        credentials = _credentials(known)
        credentials.refresh(Request())
        assert credentials.token == endpoint.issued[0]

        # the same account's e-mail with another key: the signature does not verify
        forged = write_adc_key(tmp_path / "forged.json", token_uri=endpoint.url)
        info = json.loads(forged.read_text())
        info["client_email"] = key_identity(known)[1]
        forged.write_text(json.dumps(info))
        stranger = write_adc_key(tmp_path / "stranger.json", project="other",
                                 token_uri=endpoint.url)
        for path in (forged, stranger):
            with pytest.raises(RefreshError, match="invalid_grant"):
                _credentials(path).refresh(Request())
        assert len(endpoint.issued) == 1


def test_an_expired_or_misaddressed_assertion_is_refused(tmp_path: Path):
    with token_endpoint() as endpoint:
        path = write_adc_key(tmp_path / "key.json", token_uri=endpoint.url)
        endpoint.know(*key_identity(path))
        assertion = _credentials(path)._make_authorization_grant_assertion().decode()
        form = {"grant_type": "urn:ietf:params:oauth:grant-type:jwt-bearer",
                "assertion": assertion}
        assert endpoint.answer(form)[0] == 200
        status, body = endpoint.answer({**form, "grant_type": "client_credentials"})
        assert (status, body["error"]) == (400, "unsupported_grant_type")
        # an hour and a minute later: past the assertion's exp (an hour)
        assert grant_problem(form, *key_identity(path), now=time.time() + 3660)
        credentials = _credentials(path)
        now = int(time.time())
        elsewhere = jwt.encode(credentials.signer, {
            "iss": credentials.service_account_email, "aud": "https://example.invalid/token",
            "iat": now, "exp": now + 3600, "scope": ""}).decode()
        assert endpoint.answer({**form, "assertion": elsewhere})[0] == 400
        tampered = assertion.rsplit(".", 1)[0] + ".AAAA"
        assert endpoint.answer({**form, "assertion": tampered})[0] == 400
        assert urllib.parse.urlparse(endpoint.url).hostname == "127.0.0.1"
