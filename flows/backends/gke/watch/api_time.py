"""An API object's timestamps as Unix times: the meters and watches compare them with the
wall clock (metav1.Time is RFC 3339 in whole seconds with a "Z"; a missing or malformed
stamp is None, so one odd object never stops a watch)."""

from __future__ import annotations

from datetime import datetime


def api_time(stamp: object) -> float | None:
    """An API object's RFC 3339 time as a Unix time, or None when absent or malformed."""
    if not isinstance(stamp, str) or not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def seconds_since(stamp: object, now: datetime) -> float:
    """Seconds from an API object's time to ``now``; 0 when it has none (or a malformed one)."""
    at = api_time(stamp)
    return 0.0 if at is None else now.timestamp() - at
