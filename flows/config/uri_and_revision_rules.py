"""The rules a dataset URI or a base-model revision must pass when it does not come from the
profile file (pure): a revision is a full commit, a URI lies inside one of the profile's
``announcements.allowed_uri_prefixes`` directories.

Whoever reaches Prefect's API can post an announcement event or create a run of a retrain
deployment with its own ``dataset_uri``, ``model_revision`` or ``overrides``. The dispatcher
(flows/announcements/admission.py) and the profile loader (flows/config/loading.py, for a
deployment's run) both apply these rules, so no route into a retrain run skips them.

"Inside a directory" is decided on the URI as written, compared with a prefix that always
ends in ``/``: the readers downstream (gcsfs, huggingface_hub's file system, the local file
system) may decode ``%2F``, resolve ``..``, collapse ``//``, drop a query or follow a
fragment, and a plain prefix test on such a URI can say "inside" for an object outside. So
any URI holding one of those forms is refused outright, naming the fix; what is left has
one meaning, and a prefix test on it is a test by path segment.
"""

from __future__ import annotations

import re
from urllib.parse import urlparse

COMMIT = re.compile(r"[0-9a-f]{40}")
SCHEMES = ("file", "gs", "hf")
# Characters a reader may decode or cut at (percent-encoding, a query, a fragment, a Windows
# separator); glob characters are refused in a prefix only (a dataset may be a pattern,
# which never matches above its literal directory).
AMBIGUOUS = ("%", "?", "#", "\\")
GLOB = ("*", "?", "[", "]", "{", "}")
READABLE = {"local": ("file",), "gke": ("gs", "hf")}
WHAT_IT_READS = {
    "local": "a local parquet file on the machine that runs the rehearsal: an absolute path "
             "or file:///ABS/PATH.parquet",
    "gke": "a parquet object the node pool can read, gs://BUCKET/PATH.parquet, or a hub "
           "dataset file, hf://datasets/ORG/NAME/PATH.parquet"}


def shown(text: str) -> str:
    """An untrusted value in an error message: quoted, one line, bounded."""
    return repr(text if len(text) <= 80 else text[:60] + "…" + text[-19:])


def revision_problem(value: str) -> str | None:
    """Why ``value`` is not a revision anyone vouches for; None for a 40-hex commit."""
    if COMMIT.fullmatch(value.strip().lower()):
        return None
    return (f"revision {shown(value)} is not a commit; fix: give the full 40-hex commit id "
            "on the hub (a branch, tag or refs/pr/N names whatever someone pushes there "
            "next, so it is refused)")


def as_uri(value: str) -> str | None:
    """The URI the prefixes are compared with: an absolute path as a file:// URI, written as
    given (never normalised: ``a/../b`` must be refused, not turned into ``b``); None for a
    relative path, whose meaning would depend on the reader's working directory."""
    if urlparse(value).scheme:
        return value
    return "file://" + value if value.startswith("/") else None


def _shape_problem(uri: str) -> str | None:
    """Why ``uri`` has more than one meaning (see the module's docstring), or None."""
    if any(ord(c) < 32 or c == "\x7f" for c in uri):
        return "holds control characters"
    if found := [c for c in AMBIGUOUS if c in uri]:
        return (f"holds {' and '.join(repr(c) for c in found)} (percent-encoding, a query, a "
                "fragment or a backslash, which readers decode or cut at)")
    scheme, sep, rest = uri.partition("://")
    if not sep or scheme != scheme.lower():
        return "is not written scheme://… with a lowercase scheme"
    _host, _slash, path = rest.partition("/")
    segments = path.split("/")
    for dots in ("..", "."):
        if dots in segments:
            return f"has a {dots!r} segment"
    if any(s == "" for s in segments[:-1]):
        return "has an empty path segment ('//')"
    return None


def dataset_uri_problem(value: str, backend: str, prefixes: list[str], profile: str,
                        verb: str = "give") -> str | None:
    """Why the profile ``profile`` (its ``backend`` and allowed ``prefixes``) refuses the
    dataset URI ``value``, with the fix (``verb``: how the reader passes a URI, "give" or
    "announce"); None to accept."""
    uri = as_uri(value)
    if uri is None:
        return f"{shown(value)} is a relative path; fix: {verb} {WHAT_IT_READS[backend]}"
    if problem := _shape_problem(uri):
        return (f"{shown(value)} {problem}; fix: {verb} the object's own URI, written plainly "
                "(one line, no '..', '//', '%', '?' or '#')")
    scheme = uri.partition("://")[0]
    if scheme not in READABLE[backend]:
        return (f"{shown(value)} is a {scheme}:// URI, which the target profile {profile} (backend "
                f"{backend}) cannot read; fix: {verb} {WHAT_IT_READS[backend]}")
    if scheme == "hf" and (revision := _hub_revision(uri)) is not None and \
            revision_problem(revision) is not None:
        return (f"{shown(value)} names the dataset at {shown(revision)}, not a commit; fix: "
                f"{verb} the file at the full 40-hex commit (…/NAME@COMMIT/PATH) or without "
                "'@'")
    if not any(uri.startswith(prefix) for prefix in prefixes):
        allowed = ", ".join(prefixes) or "none (the default)"
        return (f"{shown(value)} is under no prefix the profile {profile} allows "
                f"(announcements.allowed_uri_prefixes: {allowed}); fix: if the source is "
                "trusted, add the directory it publishes to to announcements."
                f"allowed_uri_prefixes in the profile (e.g. {shown(uri.rsplit('/', 1)[0] + '/')})")
    return None


def _hub_revision(uri: str) -> str | None:
    """The revision an hf:// URI pins its repository at (``hf://datasets/ORG/NAME@REV/…``),
    None when it names none: a branch there is as mutable as a branch revision."""
    parts = uri.partition("://")[2].split("/")
    repo = parts[2] if len(parts) > 2 else ""
    return repo.partition("@")[2] if "@" in repo else None


def prefix_problem(prefix: str) -> str | None:
    """Why ``prefix`` (a URI, already absolute) names no directory a URI can be checked
    against, or None. Refused: what ``_shape_problem`` refuses, glob characters, an unknown
    scheme, a gs:// bucket or hf:// dataset organisation missing, a file:// URI with a host.
    A bucket is compared as written: GCS bucket names are lowercase and GCS does not fold
    case, so a spelling with capitals (the docs' BUCKET) matches no object another spelling
    names."""
    if problem := _shape_problem(as_directory(prefix)):
        return problem
    if found := [c for c in GLOB if c in prefix]:
        return f"holds the glob character(s) {' '.join(found)}"
    scheme, _sep, rest = prefix.partition("://")
    if scheme not in SCHEMES:
        return f"has the scheme {scheme!r}, not one of {', '.join(SCHEMES)}"
    host = rest.partition("/")[0]
    if scheme == "file" and host:
        return f"names the host {host!r} (a file:// prefix is file:///ABS/DIR/)"
    if scheme == "gs" and not host:
        return "names no bucket"
    if scheme == "hf" and (rest.split("/")[0] != "datasets" or
                           len([p for p in rest.split("/") if p]) < 2):
        return "names no dataset organisation (hf://datasets/ORG/ or hf://datasets/ORG/NAME/)"
    return None


def as_directory(prefix: str) -> str:
    """The prefix as a directory: ``gs://corp-data/datasets`` would otherwise admit
    ``gs://corp-data/datasets-untrusted/…``."""
    return prefix if prefix.endswith("/") else prefix + "/"
