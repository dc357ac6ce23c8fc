"""Which announced datasets a target profile accepts (flows/announcements/admission.py), pure:
each refusal names the field and the fix; what is under an allowed prefix is accepted."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from flows.announcements.admission import admission_problem
from flows.announcements.model import Announcement
from flows.config.announcements import AnnouncementsSection
from flows.config.profile import Profile
from flows.config.uri_and_revision_rules import as_uri
from tests.support.profiles import tutorial_profile

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def target(backend: str, *prefixes: str) -> Profile:
    profile = tutorial_profile()
    return profile.model_copy(update={
        "backend": backend,
        "announcements": AnnouncementsSection(allowed_uri_prefixes=list(prefixes))})


def dataset(value: str, kind: str = "dataset") -> Announcement:
    return Announcement(kind, value, "e-1", T0)


@pytest.mark.parametrize(("value", "expected"), [
    ("gs://b/x.parquet", "gs://b/x.parquet"),
    ("/data/x.parquet", "file:///data/x.parquet"),
    ("/data/./y/../x.parquet", "file:///data/./y/../x.parquet"),
    ("data/x.parquet", None),
])
def test_a_uri_is_compared_as_written_a_path_as_a_file_uri_never_normalised(value, expected):
    assert as_uri(value) == expected


@pytest.mark.parametrize(("backend", "value", "prefix"), [
    ("gke", "gs://b/data/v1.parquet", "gs://b/data/"),
    ("gke", "hf://datasets/org/name/train.parquet", "hf://datasets/org/"),
    ("local", "/srv/data/v1.parquet", "file:///srv/data/"),
    ("local", "file:///srv/data/v1.parquet", "file:///srv/data/"),
])
def test_a_readable_uri_under_an_allowed_prefix_is_accepted(backend, value, prefix):
    assert admission_problem(target(backend, "gs://other/", prefix), dataset(value)) is None


def test_a_revision_is_not_judged_here():
    assert admission_problem(target("gke"), dataset("relative", kind="revision")) is None


def test_control_characters_are_refused_first():
    for bad in ("gs://b/data/x\n.parquet", "gs://b/data/x\x7f", "gs://b/data/\x1fx"):
        why = admission_problem(target("gke", "gs://b/"), dataset(bad))
        assert why is not None and why.startswith("announcement.value: ")
        assert "holds control characters; fix: announce the object's own URI, written " \
            "plainly (one line" in why
    assert admission_problem(target("gke", "gs://b/"), dataset("gs://b/ x~.parquet")) is None


def test_a_relative_path_is_refused_naming_what_the_backend_reads():
    why = admission_problem(target("local", "file:///"), dataset("data/x.parquet"))
    assert why == ("announcement.value: 'data/x.parquet' is a relative path; fix: announce a "
                   "local parquet file on the machine that runs the rehearsal: an absolute "
                   "path or file:///ABS/PATH.parquet")


def test_a_dot_dot_segment_is_refused_even_under_an_allowed_prefix():
    why = admission_problem(target("gke", "gs://b/data/"), dataset("gs://b/data/../x.parquet"))
    assert why == ("announcement.value: 'gs://b/data/../x.parquet' has a '..' segment; "
                   "fix: announce the object's own URI, written plainly (one line, "
                   "no '..', '//', '%', '?' or '#')")
    why = admission_problem(target("local", "file:///data/"), dataset("/data/y/../x.parquet"))
    assert why is not None and "has a '..' segment" in why
    assert admission_problem(target("gke", "gs://b/data/"),
                             dataset("gs://b/data/..x/y.parquet")) is None


def test_a_scheme_the_backend_cannot_read_is_refused_naming_what_it_reads():
    profile = target("local", "gs://b/")
    why = admission_problem(profile, dataset("gs://b/x.parquet"))
    assert why == ("announcement.value: 'gs://b/x.parquet' is a gs:// URI, which the target "
                   f"profile {profile.name} (backend local) cannot read; fix: announce a local "
                   "parquet file on the machine that runs the rehearsal: an absolute path or "
                   "file:///ABS/PATH.parquet")
    why = admission_problem(target("gke", "file:///"), dataset("/srv/x.parquet"))
    assert why is not None and "is a file:// URI" in why and "gs://BUCKET/PATH.parquet" in why


def test_outside_every_prefix_is_refused_naming_the_field_and_the_directory():
    profile = target("gke", "gs://b/data/", "gs://c/")
    why = admission_problem(profile, dataset("gs://b/other/v1.parquet"))
    assert why == (f"announcement.value: 'gs://b/other/v1.parquet' is under no prefix the "
                   f"profile {profile.name} allows (announcements.allowed_uri_prefixes: "
                   "gs://b/data/, gs://c/); fix: if the source is trusted, add the directory "
                   "it publishes to to announcements.allowed_uri_prefixes in the profile "
                   "(e.g. 'gs://b/other/')")
    none = admission_problem(target("gke"), dataset("gs://b/other/v1.parquet"))
    assert none is not None and "allowed_uri_prefixes: none (the default))" in none
