"""Registry questions without a Docker daemon: the digest of a reference, over the registry's
own HTTP API (the OCI distribution spec's ``HEAD /v2/<name>/manifests/<reference>``).

Why: the Cloud Build path runs where no daemon exists (a Kubernetes work pool's pod), yet it
must pin the base to a digest and ask whether the content tag is already pushed *before* it
submits anything, exactly as the Docker path does through the daemon (registry_daemon.py).

Authentication is the registry's token flow (distribution's docs/spec/auth/token.md): an
anonymous request, and on ``401`` with a ``Bearer`` challenge a token from the challenge's
realm, asked with basic auth ``oauth2accesstoken:<Google access token>`` when a token source
is given (what ``gcloud auth configure-docker``'s helper hands Docker for Artifact
Registry). Loopback registries are spoken to over plain HTTP, as dockerd does by default.
"""

from __future__ import annotations

import base64
import json
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable

from docker.utils import parse_repository_tag

from flows.backends.gke.image.errors import BaseImageNotFound, ImageError, RegistryUnavailable
from flows.common.failure_codes import Failure
from flows.core.redaction import register
from flows.core.retry import InfrastructureFault, OnRetry, RetryPolicy, call_with_retries

# What docker asks for (manifest lists and OCI indexes first), so the digest is the one the
# daemon path reports for the same reference.
ACCEPT = ", ".join([
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
])
TokenSource = Callable[[], str | None]


def split_reference(ref: str) -> tuple[str, str, str]:
    """Pure: (registry host, repository path, tag or digest) of ``host/path:tag``."""
    repo, tag = parse_repository_tag(ref)
    host, _, path = repo.partition("/")
    if not path or ("." not in host and ":" not in host and host != "localhost"):
        raise ValueError(f"{ref!r} names no registry host (a Docker Hub name); give the full "
                         "host/path reference")
    return host, path, tag or "latest"


def base_url(host: str) -> str:
    """Pure: loopback registries over HTTP (dockerd's default insecure range), others HTTPS."""
    name = host.rsplit(":", 1)[0] if not host.startswith("[") else host
    plain = name in ("localhost", "[::1]") or name.startswith("127.")
    return f"{'http' if plain else 'https'}://{host}"


def parse_challenge(header: str) -> dict[str, str]:
    """Pure: ``Bearer realm="…",service="…",scope="…"`` as a dict (keys lowercase)."""
    scheme, _, rest = header.partition(" ")
    fields = {k.lower(): v for k, v in re.findall(r'(\w+)="([^"]*)"', rest)}
    fields["scheme"] = scheme.lower()
    return fields


class RegistryApi:
    def __init__(self, token_source: TokenSource | None = None, timeout_s: float = 30.0) -> None:
        self.token_source, self.timeout_s = token_source, timeout_s
        self._bearer: dict[str, str] = {}  # realm+scope -> token

    def digest(self, ref: str, backoff: RetryPolicy, on_retry: OnRetry | None = None) -> str | None:
        """The manifest digest of ``ref``, or None when the registry does not have it."""
        host, path, reference = split_reference(ref)
        url = f"{base_url(host)}/v2/{path}/manifests/{reference}"
        attempts = 0

        def once() -> str | None:
            nonlocal attempts
            attempts += 1
            return self._head(url, path)

        try:
            return call_with_retries(once, backoff, on_retry)
        except InfrastructureFault as exc:
            raise RegistryUnavailable(ref, str(exc), attempts) from exc

    def _head(self, url: str, path: str, auth: str | None = None) -> str | None:
        request = urllib.request.Request(url, method="HEAD", headers={"Accept": ACCEPT})
        if auth:
            request.add_header("Authorization", auth)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                digest = response.headers.get("Docker-Content-Digest")
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            if exc.code == 401 and auth is None:
                return self._head(url, path, self._authorization(exc.headers.get(
                    "WWW-Authenticate", ""), path))
            if exc.code == 429 or exc.code >= 500:
                raise InfrastructureFault(f"HTTP {exc.code} from {url}") from exc
            raise RegistryRefused(f"HTTP {exc.code} from {url}: {exc.reason}") from exc
        except (urllib.error.URLError, OSError) as exc:
            raise InfrastructureFault(f"{url}: {getattr(exc, 'reason', exc)}") from exc
        if not digest:
            raise RegistryRefused(f"{url} answered without a Docker-Content-Digest header")
        return digest

    def _authorization(self, header: str, path: str) -> str:
        challenge = parse_challenge(header)
        secret = self.token_source() if self.token_source else None
        if secret:  # the basic credential and its base64 header: out of every text
            register(f"oauth2accesstoken:{secret}")
        if challenge["scheme"] == "basic":
            if secret is None:
                raise RegistryRefused("the registry wants credentials and none were given")
            return "Basic " + base64.b64encode(f"oauth2accesstoken:{secret}".encode()).decode()
        query = {"service": challenge.get("service", ""),
                 "scope": challenge.get("scope", f"repository:{path}:pull")}
        url = f"{challenge['realm']}?{urllib.parse.urlencode(query)}"
        if url not in self._bearer:
            request = urllib.request.Request(url)
            if secret is not None:
                request.add_header("Authorization", "Basic " + base64.b64encode(
                    f"oauth2accesstoken:{secret}".encode()).decode())
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                    body = json.loads(response.read())
            except urllib.error.HTTPError as exc:
                raise RegistryRefused(f"the registry's token service refused: HTTP {exc.code}") from exc
            self._bearer[url] = str(body.get("token") or body.get("access_token") or "")
            register(self._bearer[url])
        return f"Bearer {self._bearer[url]}"


class RegistryRefused(ImageError):
    """The registry said no for a reason a retry will not change (auth, a malformed name)."""

    code = Failure.IMAGE_REGISTRY_REFUSED
    fix = ("check that the flow's Google account may read the repository "
           "(roles/artifactregistry.reader), and the image reference in the profile")


def pin_base_remote(api: RegistryApi, base: str, backoff: RetryPolicy,
                    on_retry: OnRetry | None = None) -> tuple[str, str]:
    """(reference to build FROM, digest) like registry.pin_base, but a base must be in a
    registry: a remote builder cannot see images that exist only in a local daemon."""
    repo, tag = parse_repository_tag(base)
    if tag and tag.startswith("sha256:"):
        return base, tag
    digest = api.digest(base, backoff, on_retry)
    if digest is None:
        raise BaseImageNotFound(base, "not in its registry (a remote builder needs it pushed)")
    return f"{repo}@{digest}", digest
