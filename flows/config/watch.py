"""A profile's ``watch`` section: how its champion is scored again after promotion, and what
a significant drop sets off.

A watch (flows/operations/watch.py) scores the champion with the evaluation program and
rewards that promoted it (flows/core/eval_programs.py), on the promotion's held-out set
unless ``files`` names a set of the team's own, and compares the score with a recorded one
(flows/core/watch_decision.py). Only a significant drop posts ``tpurl.model.regressed``.
With ``canary``, the same program also sends the first prompts of the watched set to a
serving endpoint and scores its answers with the same reward functions (decision 0042).
Not run-tunable: a run's overrides must not loosen what counts as a regression.
"""

from __future__ import annotations

import ipaddress
from typing import Self
from urllib.parse import urlparse

from pydantic import Field, model_validator

from flows.config.errors import FixableValueError
from flows.config.limits import limits
from flows.config.secret_ref import SecretRef
from flows.config.section_base import StrictModel

# hosts a plain-http request to stays inside the cluster or the machine, so a key may go there
_CLUSTER_SUFFIXES = (".svc", ".svc.cluster.local", ".cluster.local")
_ENDPOINT_FIX = ("give the server's base URL, http(s)://HOST[:PORT], e.g. "
                 "http://vllm.serving.svc.cluster.local:8000 (the canary posts to "
                 "/v1/completions below it)")


def _stays_inside(host: str) -> bool:
    """A host whose plain-http traffic never leaves the cluster or this machine."""
    if host == "localhost" or host.endswith(_CLUSTER_SUFFIXES):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class CanarySection(StrictModel):
    """A serving endpoint whose answers a watch also scores (an OpenAI-compatible server:
    vLLM, JetStream, tpu-inference). Its prompts are the watched set's first ``prompts``
    and its rewards the training's, as the champion's: nothing here can name other ones."""

    endpoint: str
    """The server's base URL (http or https, no user, query or fragment); the canary posts
    the evaluation's prompts to its /v1/completions."""
    model: str = Field(min_length=1, max_length=256)
    """The served model's name, as the server lists it (GET /v1/models): the request's
    ``model``."""
    api_key: SecretRef | None = None
    """Where the server's API key comes from ({env: NAME}, {secret_block: NAME} or
    {gcp_secret: NAME}), sent as ``Authorization: Bearer``; unset: no key. With a key, an
    http endpoint must stay inside the cluster (a .svc host, localhost)."""
    prompts: int = Field(16, ge=1, le=512)
    """How many of the watched set's prompts are sent (the first ones, in the evaluation's
    order); the canary's interval narrows with more."""
    timeout_s: float = Field(60.0, gt=0.0, le=600.0)
    """How long one request may take before the canary is unreachable (busy answers, 429
    and 503, are retried three times)."""

    @model_validator(mode="after")
    @limits({"endpoint": ["http:// or https://, with a host, and no user, query or fragment",
                          "http:// with api_key only to a host inside the cluster "
                          "(.svc, .cluster.local) or this machine"]})
    def _endpoint_is_a_server(self) -> Self:
        url = urlparse(self.endpoint)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise FixableValueError(f"{self.endpoint!r} is not an http(s) URL of a server",
                                    _ENDPOINT_FIX, field="endpoint")
        if url.username or url.password or url.query or url.fragment:
            # never echoed: a user:password or ?key= in the URL is a secret
            raise FixableValueError("holds a user, password, query or fragment (a key does "
                                    "not go in the URL)", f"{_ENDPOINT_FIX}; name the key in "
                                    "watch.canary.api_key", field="endpoint")
        if url.path.rstrip("/").endswith(("/v1", "/completions")):
            raise FixableValueError(f"{self.endpoint!r} names an API path", _ENDPOINT_FIX,
                                    field="endpoint")
        if self.api_key is not None and url.scheme == "http" and not _stays_inside(url.hostname):
            raise FixableValueError(
                f"sends the API key in clear text to {url.hostname}, outside the cluster",
                "use https:// for the endpoint, or the server's cluster-internal name "
                "(SERVICE.NAMESPACE.svc.cluster.local)", field="endpoint")
        return self


class WatchSection(StrictModel):
    files: str | None = None
    """A held-out set of the team's own to watch on (parquet files, like eval.files); unset:
    the promotion's held-out set, where the champion's promotion score is the reference. Each
    watch first checks it: outside other teams' output roots, parquet with a question and an
    answer column, at least one row, at most 1 GiB altogether."""
    dataset_name: str | None = None
    """What the watched files hold, as MaxText names it (default: the training's)."""
    split: str = "train"
    """The split name the watched files are loaded under."""
    alpha: float = Field(0.05, gt=0.0, lt=0.5)
    """The chance, over every watch of one champion however many, that an unchanged champion
    is declared regressed (each watch spends a share of it)."""
    min_drop: float = Field(0.0, ge=0.0)
    """The smallest drop of the promotion metric that counts as a regression, however sure."""
    retrain: str | None = None
    """A retrain deployment (FLOW/NAME, e.g. rl-post-training/retrain-rehearsal): after a
    regression rolls the champion back, the newest dataset announced to it is announced
    again, so its dispatcher queues a retrain judged against the restored champion."""
    canary: CanarySection | None = None
    """A serving endpoint scored beside the champion's checkpoint (its answers to the
    watched set's first prompts, with the same rewards and test); unset: no canary. A
    regressed canary posts tpurl.serving.regressed, which rolls nothing back."""
