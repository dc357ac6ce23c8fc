"""May this target train on this announcement? Checked by the dispatcher before any run is
made (pure).

Two refusals, each naming the field and the fix:
- the URI's scheme is one the target's backend cannot read (the rehearsal's programs read
  local files; the GKE pods read gs:// objects and hub datasets), which used to fail only at
  the infra stage of a queued run with an unrelated fix text;
- the URI lies under none of the profile's ``announcements.allowed_uri_prefixes``: the events
  endpoint has no authentication, so the profile's author says where datasets may come from.
A base-model revision is checked where the announcement is read (a 40-hex commit,
flows/announcements/model.py).
"""

from __future__ import annotations

import os
from urllib.parse import urlparse

from flows.announcements.model import Announcement, shown
from flows.config.profile import Profile

READABLE = {"local": ("file",), "gke": ("gs", "hf")}
WHAT_IT_READS = {
    "local": "a local parquet file on the machine that runs the rehearsal: an absolute path "
             "or file:///ABS/PATH.parquet",
    "gke": "a parquet object the node pool can read, gs://BUCKET/PATH.parquet, or a hub "
           "dataset file, hf://datasets/ORG/NAME/PATH.parquet"}


def normalised_uri(value: str) -> str | None:
    """The URI the prefixes are compared with; None for a relative path (whose meaning would
    depend on the dispatcher's working directory)."""
    if urlparse(value).scheme:
        return value
    return "file://" + os.path.normpath(value) if os.path.isabs(value) else None


def admission_problem(profile: Profile, item: Announcement) -> str | None:
    """Why ``profile`` refuses the dataset ``item`` names, with the fix; None to accept."""
    if item.kind != "dataset":
        return None
    where, value = "announcement.value", item.value
    if any(ord(c) < 32 or c == "\x7f" for c in value):
        return (f"{where}: {shown(value)} holds control characters; fix: announce the URI "
                "as one line")
    uri = normalised_uri(value)
    if uri is None:
        return (f"{where}: {shown(value)} is a relative path; fix: announce "
                f"{WHAT_IT_READS[profile.backend]}")
    parsed = urlparse(uri)
    if ".." in parsed.path.split("/"):
        return f"{where}: {shown(value)} has a '..' segment; fix: announce the object's own URI"
    readable = READABLE[profile.backend]
    if parsed.scheme not in readable:
        return (f"{where}: {shown(value)} is a {parsed.scheme}:// URI, which the target profile "
                f"{profile.name} (backend {profile.backend}) cannot read; fix: announce "
                f"{WHAT_IT_READS[profile.backend]}")
    prefixes = profile.announcements.allowed_uri_prefixes
    if not any(uri.startswith(prefix) for prefix in prefixes):
        allowed = ", ".join(prefixes) or "none (the default)"
        return (f"{where}: {shown(value)} is under no prefix the profile {profile.name} allows "
                f"(announcements.allowed_uri_prefixes: {allowed}); fix: if the source is "
                "trusted, add the directory it publishes to to announcements."
                f"allowed_uri_prefixes in the profile (e.g. {shown(uri.rsplit('/', 1)[0] + '/')})")
    return None
