"""A profile's ``announcements`` section: which URIs an announcement may name for it, and how
long a burst of announcements may settle before it is decided.

Open-source Prefect's events endpoint has no authentication, so whoever reaches the API can
announce a dataset. The profile's author says where its datasets may come from; the
dispatcher refuses any other URI before a run is made (flows/announcements/admission.py).
Not a run-tunable field: a run's overrides cannot widen it. Each prefix is kept as a
directory (a trailing ``/`` added: ``gs://corp-data/datasets`` must not admit
``gs://corp-data/datasets-untrusted/…``); the rules themselves are
flows/config/uri_and_revision_rules.py.
"""

from __future__ import annotations

from typing import Annotated
from urllib.parse import urlparse

from pydantic import Field

from flows.common.paths import file_uri, repo_relative
from flows.config.errors import FixableValueError
from flows.config.section_base import StrictModel
from flows.config.types import Checked
from flows.config.uri_and_revision_rules import SCHEMES, as_directory, prefix_problem


def _prefix(value: str) -> str:
    """The prefix as the directory it names (a trailing '/' added, the scheme in lowercase),
    so a URI is inside it by whole path segments."""
    prefix = value if urlparse(value).scheme else file_uri(repo_relative(value))
    scheme, sep, rest = prefix.partition("://")
    prefix = as_directory(scheme.lower() + sep + rest)
    if problem := prefix_problem(prefix):
        raise FixableValueError(
            f"{value!r} {problem}: not a directory an announced URI can be checked against",
            "give gs://BUCKET/DIR/, hf://datasets/ORG/NAME/, file:///ABS/DIR/ or a directory "
            "relative to the repository, written plainly (no '..', '//', '%', '?', '#' or glob "
            "characters)")
    return prefix


UriPrefix = Annotated[str, Checked(
    _prefix, f"each a directory URI ({', '.join(SCHEMES)}: gs://BUCKET/DIR/, hf://datasets/ORG/, "
    "file:///ABS/DIR/) or a directory of the repository; no glob characters")]

class AnnouncementsSection(StrictModel):
    # URI prefixes ("gs://BUCKET/data/", "hf://datasets/ORG/NAME/", "file:///abs/dir/" or a
    # directory relative to the repository); an announced dataset must lie under one. Empty
    # (the default): every dataset announcement is refused, naming this field.
    allowed_uri_prefixes: list[UriPrefix] = Field(default_factory=list)
    """URI prefixes an announced dataset may start with; none: every dataset announcement is
    refused."""
    # A burst of announcements (a pipeline publishing many versions at once) is decided
    # once, after it settled: the first dispatcher waits until no announcement for the
    # target came for this long (at most 300 s), then queues one run for all of them
    # (flows/announcements/pending.py). 0: decide at once (one run per burst still, for the
    # announcements already there).
    settle_s: float = Field(default=30.0, ge=0, le=300)
    """Seconds without a new announcement before a burst is decided (one retrain run for
    all of it)."""

