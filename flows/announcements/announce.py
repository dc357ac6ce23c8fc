"""`tpurl announce PROFILE --dataset URI | --revision SHA`: post one announcement as any
emitter would (POST /api/events, a new id and `occurred`), after the checks the target's
dispatcher makes, so a bad one is refused here with the fix instead of in a dispatcher run.

A relative dataset path is made absolute (file://...) here, where the reader's working
directory is known; the dispatcher refuses relative paths.
"""

from __future__ import annotations

import os
import sys
import uuid
from datetime import UTC, datetime
from urllib.parse import urlparse

from prefect.client.orchestration import get_client
from prefect.settings import PREFECT_API_URL

from flows.announcements.admission import admission_problem
from flows.announcements.model import Announcement, AnnouncementError
from flows.common.event_catalogue import BASE_MODEL_UPDATED, DATASET_UPDATED
from flows.config import load_profile


def announcement_body(profile: str, kind: str, value: str) -> dict[str, object]:
    """The event, as the JSON examples of docs/how-to/announce.md write it."""
    event_id, occurred = str(uuid.uuid4()), datetime.now(UTC).isoformat()
    if kind == "dataset":
        name = os.path.basename(urlparse(value).path.rstrip("/")).split(".")[0] or "data"
        return {"id": event_id, "occurred": occurred, "event": DATASET_UPDATED.name,
                "resource": {"prefect.resource.id": f"tpurl.dataset.{name}",
                             "tpurl.profile": profile},
                "payload": DATASET_UPDATED.checked({"uri": value})}
    return {"id": event_id, "occurred": occurred, "event": BASE_MODEL_UPDATED.name,
            "resource": {"prefect.resource.id": "tpurl.base-model.hub",
                         "tpurl.profile": profile},
            "payload": BASE_MODEL_UPDATED.checked({"revision": value})}


def announce_command(profile_name: str, dataset: str | None, revision: str | None) -> int:
    kind, value = ("dataset", dataset) if dataset else ("base-model", revision or "")
    if kind == "dataset" and not urlparse(value).scheme:
        value = "file://" + os.path.abspath(value)
    profile = load_profile(profile_name, origin="flow")
    body = announcement_body(profile.name, kind, value)
    try:
        item = Announcement.of(kind, value, body["id"], body["occurred"])
        if problem := admission_problem(profile, item):
            raise AnnouncementError(problem)
    except AnnouncementError as exc:
        print(f"error: {exc}; nothing was announced", file=sys.stderr)
        return 2
    if not PREFECT_API_URL.value():
        print("error: PREFECT_API_URL is not set, so there is no API whose automations would "
              "see the announcement; fix: prefect config set PREFECT_API_URL=http://HOST:4200/api "
              "(or `prefect cloud login`); nothing was announced", file=sys.stderr)
        return 2
    with get_client(sync_client=True) as client:
        client.request("POST", "/events", json=[body]).raise_for_status()
    print(f"announced {item.describe()} to {profile.name}")
    return 0
