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


def write_adc_key(path: Path, project: str = "my-proj") -> Path:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    path.write_text(json.dumps({
        "type": "service_account", "project_id": project, "private_key_id": "0" * 40,
        "private_key": pem, "client_email": f"tpurl-test@{project}.iam.gserviceaccount.com",
        "client_id": "1" * 21, "token_uri": "https://oauth2.googleapis.com/token"}))
    return path
