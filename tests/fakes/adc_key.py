"""A service-account key file in Google's format, standing in for a user's Application Default
Credentials where none exist (this machine): `google.auth.default()` reads the file named by
GOOGLE_APPLICATION_CREDENTIALS and builds credentials from it without any network call
(google/auth/_default.py: _get_explicit_environ_credentials -> load_credentials_from_file ->
service_account.Credentials.from_service_account_info). The key is fresh and signs nothing
that any server accepts."""

from __future__ import annotations

import json
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa


def write_adc_key(path: Path, project: str = "my-proj",
                  token_uri: str = "https://oauth2.googleapis.com/token") -> Path:
    """``token_uri``: where the credentials refresh (tests/fakes/oauth_token.py serves one)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    path.write_text(json.dumps({
        "type": "service_account", "project_id": project, "private_key_id": "0" * 40,
        "private_key": pem, "client_email": f"tpurl-test@{project}.iam.gserviceaccount.com",
        "client_id": "1" * 21, "token_uri": token_uri}))
    return path


def key_identity(path: Path) -> tuple[rsa.RSAPublicKey, str]:
    """The public half of a key file written above and its service account's e-mail: what
    Google's token endpoint checks a grant against."""
    info = json.loads(path.read_text())
    key = serialization.load_pem_private_key(info["private_key"].encode(), password=None)
    assert isinstance(key, rsa.RSAPrivateKey)
    return key.public_key(), info["client_email"]
