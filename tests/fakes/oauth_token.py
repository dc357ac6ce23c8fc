"""Google's OAuth 2.0 token endpoint for a service-account key, on 127.0.0.1, where
oauth2.googleapis.com is not reachable (this machine).

What it answers follows google-auth 2.63 (the flow image's lock): a service account's
credentials refresh by POSTing a form `grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer`
and `assertion=<JWT>` to the key's `token_uri` (google/oauth2/_client.py jwt_grant); the JWT
is RS256-signed by the key, its `iss` the account's e-mail and its `aud` always Google's
endpoint, https://oauth2.googleapis.com/token (google/oauth2/service_account.py
_make_authorization_grant_assertion); the answer's `access_token` and `expires_in` are read
(_client.py jwt_grant, _parse_expiry). As the real endpoint does, it refuses a grant it cannot
verify with 400 `invalid_grant` (google-auth raises RefreshError on it, without retrying): a
bad signature, another issuer or audience, an expired assertion."""

from __future__ import annotations

import base64
import contextlib
import json
import secrets
import threading
import time
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from tests.support.net import send_json

JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
GOOGLE_TOKEN_AUDIENCE = "https://oauth2.googleapis.com/token"


def _b64(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def grant_problem(form: dict[str, str], public_key: rsa.RSAPublicKey, email: str,
                  now: float) -> str | None:
    """Why the endpoint refuses this grant, or None when it issues a token."""
    if form.get("grant_type") != JWT_BEARER:
        return "unsupported_grant_type"
    try:
        header, payload, signature = form["assertion"].split(".")
        claims = json.loads(_b64(payload))
        algorithm = json.loads(_b64(header)).get("alg")
        public_key.verify(_b64(signature), f"{header}.{payload}".encode(),
                          padding.PKCS1v15(), hashes.SHA256())
    except (KeyError, ValueError, InvalidSignature):
        return "Invalid JWT Signature."
    if algorithm != "RS256":
        return "Invalid JWT Signature."
    if claims.get("iss") != email or claims.get("aud") != GOOGLE_TOKEN_AUDIENCE:
        return "Invalid JWT: iss or aud claim is wrong."
    if not claims.get("exp", 0) > now:
        return "Invalid JWT: Token must be a short-lived token and in a reasonable timeframe."
    return None


class TokenEndpoint:
    """The endpoint's address, the keys it knows (as Google knows a service account's public
    keys) and the tokens it issued."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.keys: dict[str, rsa.RSAPublicKey] = {}  # by the account's e-mail
        self.issued: list[str] = []

    def know(self, public_key: rsa.RSAPublicKey, email: str) -> None:
        self.keys[email] = public_key

    def answer(self, form: dict[str, str]) -> tuple[int, dict[str, object]]:
        email = _issuer(form.get("assertion", ""))
        key = self.keys.get(email or "")
        problem = ("Invalid JWT Signature." if key is None or email is None
                   else grant_problem(form, key, email, time.time()))
        if problem == "unsupported_grant_type":  # RFC 6749 5.2: its own error code
            return 400, {"error": problem}
        if problem is not None:
            return 400, {"error": "invalid_grant", "error_description": problem}
        # unique across endpoints, as Google's are: a token one test registered as a secret
        # is never another test's, whose redaction then proves its own registration
        token = f"ya29.fake-{secrets.token_hex(6)}-{len(self.issued)}"
        self.issued.append(token)
        return 200, {"access_token": token, "expires_in": 3599, "token_type": "Bearer"}


def _issuer(assertion: str) -> str | None:
    try:
        return json.loads(_b64(assertion.split(".")[1])).get("iss")
    except (IndexError, ValueError):
        return None


@contextlib.contextmanager
def token_endpoint() -> Iterator[TokenEndpoint]:
    """Serves the token endpoint on 127.0.0.1 while the block runs."""
    holder: list[TokenEndpoint] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            form = dict(urllib.parse.parse_qsl(self.rfile.read(length).decode()))
            send_json(self, *holder[0].answer(form))

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    holder.append(TokenEndpoint(f"http://127.0.0.1:{server.server_address[1]}/token"))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield holder[0]
    finally:
        server.shutdown()
        server.server_close()
