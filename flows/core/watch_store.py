"""``watch-history.json`` beside the promoted pointer: every watch of the profile's champion,
oldest first, only ever appended to (as promoted-history.json is).

In the profile's output root (the bucket on GKE), so a reader finds what the watches saw
with ``gcloud storage cat`` and no Prefect database, and the next watch finds its number
(flows/core/watch_record.py).
"""

from __future__ import annotations

import json
import logging

from pydantic import TypeAdapter, ValidationError

from flows.config.profile import Profile
from flows.core.promotion_store import pointer_uris
from flows.core.storage import Storage
from flows.core.watch_record import WatchRecord

log = logging.getLogger(__name__)
_RECORDS = TypeAdapter(list[WatchRecord])
WATCH_FILE = "watch-history.json"


def watch_history_uri(profile: Profile) -> str:
    pointer = pointer_uris(profile)[0]
    return pointer.rsplit("/", 1)[0] + "/" + WATCH_FILE


def read_watches(storage: Storage, profile: Profile) -> list[WatchRecord]:
    text = storage.read_text(watch_history_uri(profile))
    if not text:
        return []
    try:
        return _RECORDS.validate_json(text)
    except ValidationError:
        # an unreadable history restarts the count: each champion's next watch is its first,
        # which spends a larger share of alpha; the file is rewritten from here on
        log.warning("%s is unreadable; starting a new watch history", WATCH_FILE)
        return []


def append_watch(storage: Storage, profile: Profile, record: WatchRecord) -> None:
    records = [*read_watches(storage, profile), record]
    storage.write_text(watch_history_uri(profile),
                       json.dumps(_RECORDS.dump_python(records, mode="json"), indent=1))
