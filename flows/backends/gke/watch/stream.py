"""A list+watch cache of one kind of Kubernetes object that outlives whatever the API does.

Why not ``kubernetes.watch.Watch`` in a loop: long watches go stale silently, and an
orchestrator that treats a broken stream as a failed job marks healthy runs crashed
(pitfalls 2, Prefect #7743/#8050). So this watch:
- lists once, then watches from the list's resourceVersion, and resumes from the last
  resourceVersion it saw (events or BOOKMARKs) when a stream ends or breaks;
- relists when the server says 410 Gone (the RV was compacted away);
- falls back to polling (a list every ``poll_interval_s``) after ``max_errors`` consecutive
  failures, and tries a watch again after ``poll_rounds`` good polls;
- never raises: errors are counted, logged and retried with capped backoff. Deciding that a
  run failed is the diagnosis' job, from object state, never from a transport error.

Cost: one request per ``timeout_s`` per watch while nothing breaks (the server ends a watch
at ``timeoutSeconds``), which is what keeps a long training run under 2 requests/minute.
Events arrive as the server sends them, so a terminal condition is seen within milliseconds.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

from flows.core.retry import RetryPolicy

Obj = dict[str, Any]
Lister = Callable[..., Any]  # a kubernetes list call: accepts watch=, resource_version=, ...
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WatchSettings:
    timeout_s: int = 300  # server-side watch length: one request per watch per timeout_s
    read_timeout_s: float = 360.0  # no byte for this long = a stale stream (pitfall 2)
    connect_timeout_s: float = 10.0
    max_errors: int = 3  # consecutive failures before falling back to polling
    poll_interval_s: float = 30.0
    poll_rounds: int = 4  # good polls before trying a watch again
    backoff_s: float = 1.0
    backoff_cap_s: float = 30.0

    def backoff(self, errors: int) -> float:
        return RetryPolicy(base_s=self.backoff_s, max_s=self.backoff_cap_s).delay(errors)


def status_of(exc: BaseException) -> int | None:
    return exc.status if isinstance(exc, ApiException) else None


class WatchError(RuntimeError):
    """An ERROR event other than 410 inside a watch stream."""


class ObjectWatch:
    """Keeps ``objects`` (name → object dict) current; calls ``on_change`` after each change."""

    def __init__(self, label: str, lister: Lister, on_change: Callable[[], None],
                 settings: WatchSettings | None = None,
                 warn: Callable[[str], None] | None = None) -> None:
        self.label, self.lister, self.on_change = label, lister, on_change
        self.settings = settings or WatchSettings()
        self.warn = warn or log.warning
        self.objects: dict[str, Obj] = {}
        self.deleted: set[str] = set()
        self.synced = threading.Event()  # the first list has arrived
        self.errors = self.relists = self.requests = 0
        self.polling = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._response: Any = None
        self._thread = threading.Thread(target=self._run, name=f"watch-{label}", daemon=True)

    # --- public --------------------------------------------------------------------------
    def start(self) -> ObjectWatch:
        self._thread.start()
        return self

    def stop(self, join_s: float = 2.0) -> None:
        self._stop.set()
        response = self._response
        if response is not None:  # unblocks a read that waits for the next event
            with contextlib.suppress(Exception):
                response.shutdown()
        self._thread.join(join_s)

    def snapshot(self) -> list[Obj]:
        with self._lock:
            return list(self.objects.values())

    def get(self, name: str) -> Obj | None:
        with self._lock:
            return self.objects.get(name)

    # --- the loop ------------------------------------------------------------------------
    def _run(self) -> None:
        rv: str | None = None
        streak = 0
        while not self._stop.is_set():
            try:
                if rv is None or self.polling:
                    rv = self._relist()
                if self.polling:
                    for _ in range(self.settings.poll_rounds):
                        if self._stop.wait(self.settings.poll_interval_s):
                            return
                        rv = self._relist()
                    self.polling, streak = False, 0
                    continue
                rv = self._stream(rv)
                streak = 0
            except Exception as exc:  # a watch error alone never fails the stage (pitfalls 2)
                if self._stop.is_set():
                    return
                streak += 1
                self.errors += 1
                if status_of(exc) == 410:
                    rv = None
                if streak >= self.settings.max_errors and not self.polling:
                    self.polling = True
                    self.warn(f"watch {self.label}: {streak} errors in a row, polling every "
                              f"{self.settings.poll_interval_s:.0f} s until it recovers "
                              f"({_short(exc)})")
                elif streak < self.settings.max_errors:
                    self.warn(f"watch {self.label}: {_short(exc)}; reconnecting")
                if self._stop.wait(self.settings.backoff(streak)):
                    return

    def _timeout(self) -> tuple[float, float]:
        return (self.settings.connect_timeout_s, self.settings.read_timeout_s)

    def _relist(self) -> str:
        self.requests += 1
        response = self.lister(_preload_content=False, _request_timeout=self._timeout())
        data = json.loads(response.data)
        with self._lock:
            fresh = {o["metadata"]["name"]: o for o in data.get("items") or []}
            self.deleted |= set(self.objects) - set(fresh)
            self.objects = fresh
        self.relists += 1
        self.synced.set()
        self.on_change()
        return str(data["metadata"]["resourceVersion"])

    def _stream(self, rv: str) -> str | None:
        """One watch request; returns the RV to resume from, or None to relist (410)."""
        self.requests += 1
        response = self.lister(watch=True, resource_version=rv, allow_watch_bookmarks=True,
                               timeout_seconds=self.settings.timeout_s, _preload_content=False,
                               _request_timeout=self._timeout())
        self._response = response
        try:
            for line in iter_resp_lines(response):
                if self._stop.is_set():
                    return rv
                if not line.strip():
                    continue
                event = json.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        return None
                    raise WatchError(f"{obj.get('code')} {obj.get('reason')}: "
                                     f"{obj.get('message')}")
                rv = str(obj.get("metadata", {}).get("resourceVersion") or rv)
                if kind == "BOOKMARK":
                    continue
                self._apply(kind, obj)
            return rv
        finally:
            self._response = None
            response.release_conn()

    def _apply(self, kind: str, obj: Obj) -> None:
        name = obj["metadata"]["name"]
        with self._lock:
            if kind == "DELETED":
                self.objects.pop(name, None)
                self.deleted.add(name)
            else:
                self.objects[name] = obj
        self.on_change()


def _short(exc: BaseException) -> str:
    if isinstance(exc, ApiException):
        return f"HTTP {exc.status} {exc.reason}"
    return f"{exc.__class__.__name__}: {str(exc)[:200]}"
