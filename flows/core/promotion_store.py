"""The promoted pointer and its history in the profile's output root: read and append.

The pointer is ``tpurl-results/<profile>/promoted.json`` in the profile's output root (the
bucket on GKE, the local root in the rehearsal), written through the same Storage as the
outputs, so a serving deployment, a notebook or ``gcloud storage cat`` reads what is
promoted without the Prefect database. ``promoted-history.json`` beside it lists every
promotion and rollback, oldest first, and is only ever appended to. The run page's
promotion (flows/runpage/promotion.py) and a rollback (flows/operations/rollback.py) both
write through :func:`write_promoted`, so the two files change in one order everywhere: the
history first, the pointer last, since the pointer is what readers act on.
"""

from __future__ import annotations

import json
import logging

from pydantic import TypeAdapter, ValidationError

from flows.common.failure_codes import Failure
from flows.config.profile import Profile
from flows.core.failures import user_error
from flows.core.layout import RESULTS_DIR, Layout
from flows.core.promotion import PromotedModel
from flows.core.storage import Storage, join

log = logging.getLogger(__name__)
_HISTORY = TypeAdapter(list[PromotedModel])
POINTER_FILE, HISTORY_FILE = "promoted.json", "promoted-history.json"


def pointer_uris(profile: Profile) -> tuple[str, str]:
    base = join(Layout(profile).root, RESULTS_DIR, profile.name)
    return join(base, POINTER_FILE), join(base, HISTORY_FILE)


def read_promoted(storage: Storage, profile: Profile) -> PromotedModel | None:
    """The promoted model, or None when nothing is promoted. A damaged pointer stops the
    decision: judging against nothing could promote a worse model."""
    uri = pointer_uris(profile)[0]
    text = storage.read_text(uri)
    if text is None:
        return None
    try:
        return PromotedModel.model_validate_json(text)
    except ValidationError as exc:
        raise user_error("evaluate", "the promoted pointer is unreadable", f"{uri}: "
                         f"{str(exc).splitlines()[0]}", "restore it from promoted-history.json "
                         "beside it (its last entry), or delete it to judge against the base "
                         "model", code=Failure.EVAL_POINTER_UNREADABLE) from exc


def read_history(storage: Storage, profile: Profile) -> list[PromotedModel]:
    text = storage.read_text(pointer_uris(profile)[1])
    if not text:
        return []
    try:
        return _HISTORY.validate_json(text)
    except ValidationError:
        log.warning("promoted-history.json is unreadable; starting a new history")
        return []


def write_promoted(storage: Storage, profile: Profile, model: PromotedModel) -> None:
    """Append ``model`` to the history, then point at it."""
    pointer, history_uri = pointer_uris(profile)
    history = [*read_history(storage, profile), model]
    storage.write_text(history_uri, json.dumps(_HISTORY.dump_python(history, mode="json"),
                                               indent=1))
    storage.write_text(pointer, model.model_dump_json(indent=2))  # last: it is the commit
