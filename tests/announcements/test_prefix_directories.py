"""An allowed prefix is a directory, and a URI is inside it by whole path segments whatever
a reader downstream makes of the URI (pure; hypothesis writes the URIs).

The reader modelled is the most generous one: it lowercases the scheme and host,
percent-decodes, cuts at a query or fragment, reads a backslash as a separator, collapses
doubled slashes and resolves '.' and '..' (gcsfs, huggingface_hub's file system and the local
file system each do some of this). No URI the rules admit may land outside the prefix's
directory for that reader, and every plain URI below the prefix is admitted.
"""

from __future__ import annotations

import posixpath
from urllib.parse import unquote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flows.config.announcements import AnnouncementsSection
from flows.config.errors import FixableValueError
from flows.config.uri_and_revision_rules import dataset_uri_problem

SEGMENT = st.text(alphabet="abcdefxyz0189-_", min_size=1, max_size=6)
# pieces an attacker strings together after a prefix, or in place of part of it
TRICKS = st.sampled_from(["..", ".", "", "%2e%2e", "%2E%2E", "%2F", "%2f..%2f", "?x=/", "#/..",
                          "\\..", "..\\", "-untrusted", "x?y", "a#b", "%", "@main", "A", "B"])
PIECE = st.one_of(TRICKS, SEGMENT)


def reader_view(uri: str) -> tuple[str, str, list[str]]:
    """(scheme, host, path segments) as the most generous reader resolves ``uri``."""
    text = uri
    for _ in range(3):
        text = unquote(text)
    text = text.split("?", 1)[0].split("#", 1)[0].replace("\\", "/")
    scheme, _sep, rest = text.partition("://")
    host, _slash, path = rest.partition("/")
    resolved = posixpath.normpath("/" + path)
    return scheme.lower(), host.lower(), [s for s in resolved.split("/") if s]


def inside(uri: str, prefix: str) -> bool:
    scheme, host, segments = reader_view(uri)
    p_scheme, p_host, p_segments = reader_view(prefix)
    return (scheme, host) == (p_scheme, p_host) and segments[:len(p_segments)] == p_segments


@st.composite
def prefixes(draw: st.DrawFn) -> str:
    scheme = draw(st.sampled_from(["gs", "hf", "file"]))
    head = {"gs": "gs://corp-data", "hf": "hf://datasets/corp",
            "file": "file:///srv"}[scheme]
    segments = draw(st.lists(SEGMENT, min_size=1, max_size=3))
    slash = draw(st.sampled_from(["", "/"]))  # the profile may write it either way
    return head + "".join("/" + s for s in segments) + slash


@st.composite
def uris_near(draw: st.DrawFn, prefix: str) -> str:
    """A URI an attacker would try against ``prefix``: the prefix, cut or not, then pieces."""
    whole = draw(st.booleans())  # most attacks start with the whole prefix
    base = prefix if whole else prefix[:draw(st.integers(
        min_value=len(prefix.partition("://")[0]) + 3, max_value=len(prefix)))]
    pieces = draw(st.lists(PIECE, max_size=6))
    joiner = draw(st.sampled_from(["/", "", "//"]))
    uri = base + joiner.join(pieces) + draw(st.sampled_from(["", ".parquet", "/x.parquet"]))
    if draw(st.booleans()):
        scheme, sep, rest = uri.partition("://")
        uri = draw(st.sampled_from([scheme.upper(), scheme])) + sep + rest
    return uri


BACKEND = {"gs": "gke", "hf": "gke", "file": "local"}


@settings(max_examples=500, deadline=None)
@given(st.data())
def test_no_admitted_uri_lies_outside_the_prefix_directory_for_any_reader(data):
    written = data.draw(prefixes())
    [prefix] = AnnouncementsSection(allowed_uri_prefixes=[written]).allowed_uri_prefixes
    assert prefix.endswith("/")
    uri = data.draw(uris_near(prefix))
    backend = BACKEND[prefix.partition("://")[0]]
    if dataset_uri_problem(uri, backend, [prefix], "p") is None:
        assert inside(uri, prefix), (prefix, uri)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_every_plain_uri_below_the_prefix_is_admitted(data):
    written = data.draw(prefixes())
    [prefix] = AnnouncementsSection(allowed_uri_prefixes=[written]).allowed_uri_prefixes
    below = data.draw(st.lists(SEGMENT, min_size=1, max_size=4))
    uri = prefix + "/".join(below) + ".parquet"
    backend = BACKEND[prefix.partition("://")[0]]
    assert dataset_uri_problem(uri, backend, [prefix], "p") is None


def test_a_prefix_without_a_trailing_slash_is_a_directory():
    [prefix] = AnnouncementsSection(
        allowed_uri_prefixes=["gs://corp-data/datasets"]).allowed_uri_prefixes
    assert prefix == "gs://corp-data/datasets/"
    outside = dataset_uri_problem("gs://corp-data/datasets-untrusted/v1.parquet", "gke",
                                  [prefix], "p")
    assert outside is not None and "is under no prefix" in outside
    assert dataset_uri_problem("gs://corp-data/datasets/v1.parquet", "gke", [prefix],
                               "p") is None


@pytest.mark.parametrize(("prefix", "problem"), [
    ("gs:///data/", "names no bucket"),
    ("gs://b/data/../", "'..' segment"),
    ("gs://b//data/", "empty path segment"),
    ("gs://b/data%2F/", "'%'"),
    ("gs://b/da*ta/", "glob"),
    ("file://host/srv/", "names the host"),
    ("hf://models/org/", "names no dataset organisation"),
    ("s3://b/data/", "not one of file, gs, hf"),
])
def test_a_prefix_that_names_no_plain_directory_is_refused_naming_the_fix(prefix, problem):
    with pytest.raises(Exception) as refused:
        AnnouncementsSection(allowed_uri_prefixes=[prefix])
    cause = refused.value.errors()[0]["ctx"]["error"]  # pydantic keeps the validator's error
    assert isinstance(cause, FixableValueError) and problem in cause.problem
    assert cause.problem.startswith(repr(prefix)) and "gs://BUCKET/DIR/" in cause.fix


def test_a_scheme_is_kept_in_lowercase_and_a_hub_branch_is_refused():
    [prefix] = AnnouncementsSection(allowed_uri_prefixes=["GS://b/data"]).allowed_uri_prefixes
    assert prefix == "gs://b/data/"
    hub = ["hf://datasets/corp/"]
    why = dataset_uri_problem("hf://datasets/corp/name@dev/x.parquet", "gke", hub, "p")
    assert why is not None and "not a commit" in why
    assert dataset_uri_problem(f"hf://datasets/corp/name@{'a' * 40}/x.parquet", "gke", hub,
                               "p") is None
