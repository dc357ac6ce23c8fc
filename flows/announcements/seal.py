"""The key that seals the dispatcher's record, and the seal (docs/decisions/0025).

The record of a retrain run the dispatcher queued (flows/announcements/record.py) is an
artifact, and whoever may write artifacts through Prefect's API can write one with any key,
data and flow run. So the record carries an HMAC-SHA256 of the run's id, its deployment's id
and the announcement's digest under a key that only the workers hold: the worker's own
environment (``TPURL_DISPATCH_KEY``, inherited by each flow run's process; on the Kubernetes
pool from the pool's Secret: ``tpurl-dispatch-key`` for profiles in no team, each team's own
``tpurl-team-TEAM-dispatch-key`` on its pool, so no team's flow holds the key that seals
another team's records), else a key made once per user and machine
(``dispatch.key`` in the cache directory, 0600), which serves every worker and CLI of one
user on one machine. A run cannot set the variable (the pools' templates do not list it, so
Prefect refuses a run that adds it) and never sees the key: it is not logged, stored or
passed on.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import stat
from pathlib import Path

from flows.announcements.model import AnnouncementError
from flows.common.paths import default_cache_dir

KEY_ENV = "TPURL_DISPATCH_KEY"
KEY_FILE = "dispatch.key"
K8S_SECRET = "tpurl-dispatch-key"  # deployments/work-pool/kubernetes-base-job-template.json maps it
# the name of the Secret the pod's pool maps to KEY_ENV, which the pool's template also sets
# (a team's pool names its own): the fix for a pod without the key names it
SECRET_NAME_ENV = "TPURL_DISPATCH_KEY_SECRET"
MIN_KEY_CHARS = 32
KEY_FIX = (f"give every worker of the dispatcher and of its retrain deployment the same "
           f"{KEY_ENV} (at least {MIN_KEY_CHARS} characters, e.g. `openssl rand -hex 32`) in "
           "the environment the worker is started with")


def pool_key_secret(team: str | None) -> str:
    """The Secret the work pool of ``team`` (None: profiles in no team) maps to the key
    (flows/backends/gke/flow_pools.py writes it into the team's template). Pure."""
    return f"tpurl-team-{team}-{K8S_SECRET.removeprefix('tpurl-')}" if team else K8S_SECRET


def seal(key: bytes, run_id: str, deployment_id: str, announcement_sha256: str) -> str:
    """The record's HMAC-SHA256, hex (pure)."""
    message = json.dumps([run_id, deployment_id, announcement_sha256]).encode()  # unambiguous
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def sealed(key: bytes, run_id: str, deployment_id: str, announcement_sha256: str,
           given: object) -> bool:
    """Whether ``given`` is the seal of these three under ``key`` (pure, constant time)."""
    return isinstance(given, str) and hmac.compare_digest(
        given, seal(key, run_id, deployment_id, announcement_sha256))


def dispatch_key(environ: dict[str, str] | None = None) -> bytes:
    """The workers' key: ``TPURL_DISPATCH_KEY``, else this user's key file, made on first
    use. Refuses a short variable and a key file that others may read or that is not this
    user's, naming the fix."""
    env = os.environ if environ is None else environ
    if given := env.get(KEY_ENV, ""):
        if len(given.strip()) < MIN_KEY_CHARS:
            raise AnnouncementError(f"{KEY_ENV}: shorter than {MIN_KEY_CHARS} characters; "
                                    f"fix: {KEY_FIX}")
        return given.strip().encode()
    if env.get("KUBERNETES_SERVICE_HOST"):  # each pod's file would be a key of its own
        raise AnnouncementError(
            f"{KEY_ENV}: unset in this Kubernetes pod; fix: `kubectl create secret generic "
            f"{env.get(SECRET_NAME_ENV) or K8S_SECRET} --from-literal=value=$(openssl rand "
            "-hex 32)` in the pool's namespace, once (the pool's template maps it to every "
            "flow pod)")
    return _key_file(default_cache_dir(dict(env)) / KEY_FILE)


def _key_file(path: Path) -> bytes:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    if not path.exists():  # written whole, then linked: a reader never sees it half made
        draft = path.with_name(f".{KEY_FILE}.{os.getpid()}.{secrets.token_hex(4)}")
        fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(secrets.token_hex(32))
        try:
            os.link(draft, path)
        except FileExistsError:
            pass  # another process made it first: its key is the one
        finally:
            draft.unlink()
    try:  # never through a link: whoever placed one would choose the key
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        raise AnnouncementError(
            f"{KEY_ENV}: unset, and the key file {path} cannot be opened as a file of its own "
            f"({exc.strerror}: a symbolic link is refused); fix: remove it (a new one is made; "
            f"records sealed with the old one are no longer trusted), or {KEY_FIX}") from None
    with os.fdopen(fd) as given:
        info = os.fstat(given.fileno())
        if info.st_uid != os.geteuid() or info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise AnnouncementError(
                f"{KEY_ENV}: unset, and the key file {path} is not this user's alone; fix: "
                f"`chmod 600 {path}` as its owner, remove it (a new one is made; records "
                f"sealed with the old one are no longer trusted), or {KEY_FIX}")
        text = given.read().strip()
    if len(text) < MIN_KEY_CHARS:
        raise AnnouncementError(f"{KEY_ENV}: unset, and the key file {path} holds fewer than "
                                f"{MIN_KEY_CHARS} characters; fix: remove it (a new one is "
                                f"made), or {KEY_FIX}")
    return text.encode()
