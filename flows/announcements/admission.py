"""May this target train on this announcement? Checked by the dispatcher before any run is
made (pure).

A dataset URI must be one the target's backend can read and lie inside one of the profile's
``announcements.allowed_uri_prefixes`` (the events endpoint has no authentication, so the
profile's author says where datasets may come from); the rules are
flows/config/uri_and_revision_rules.py, which the profile loader applies as well to a deployment
run's own ``dataset_uri`` and ``model_revision``. A base-model revision is checked where the
announcement is read (a 40-hex commit, flows/announcements/model.py).
"""

from __future__ import annotations

from flows.announcements.model import Announcement
from flows.config.profile import Profile
from flows.config.uri_and_revision_rules import dataset_uri_problem


def admission_problem(profile: Profile, item: Announcement) -> str | None:
    """Why ``profile`` refuses the dataset ``item`` names, with the fix; None to accept."""
    if item.kind != "dataset":
        return None
    problem = dataset_uri_problem(item.value, profile.backend,
                                  profile.announcements.allowed_uri_prefixes, profile.name,
                                  verb="announce")
    return None if problem is None else f"announcement.value: {problem}"
