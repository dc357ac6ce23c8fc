"""A list+watch cache of one kind of Kubernetes object that outlives whatever the API does.

Why not ``kubernetes.watch.Watch`` in a loop: long watches go stale silently, and an
orchestrator that treats a broken stream as a failed job marks healthy runs crashed
(PrefectHQ/prefect#7743 and PrefectHQ/prefect#8050). So this watch:
- lists once, then watches from the list's resourceVersion, and resumes from the last
  resourceVersion it delivered (events or BOOKMARKs) when a stream ends or breaks: the
  position lives on the watch, not in the stream, so an exception mid-stream loses nothing
  and replays nothing (a stream that breaks after N events never re-reads those N);
- relists only when the server says 410 Gone (the RV was compacted away);
- counts as a failure only a stream that delivered nothing (and lasted less than
  ``healthy_s``): a stream that broke after events made progress and resumes at once;
- after ``max_errors`` such failures in a row it also lists every ``poll_interval_s`` so the
  state stays fresh, and keeps trying to watch after each list (one good stream ends it);
- never raises: errors are counted, logged and retried with capped backoff. Deciding that a
  run failed is the diagnosis' job, from object state, never from a transport error; a 403
  is kept apart (``denied``), since no retry gets past it (watch/forbidden.py).

Cost: one request per ``timeout_s`` per watch while nothing breaks (the server ends a watch
at ``timeoutSeconds``), which is what keeps a long training run under 2 requests/minute.
Events arrive as the server sends them, so a terminal condition is seen within milliseconds;
while the API fails, within ``max(backoff_cap_s, poll_interval_s)`` of it answering again.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

from flows.backends.gke.watch.client import short_error
from flows.backends.gke.watch.forbidden import Denied, denied_by
from flows.common.api_objects import Obj
from flows.common.threads import context_thread
from flows.core.retry import RetryPolicy

Lister = Callable[..., Any]  # a kubernetes list call: accepts watch=, resource_version=, ...
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WatchSettings:
    timeout_s: int = 300  # server-side watch length: one request per watch per timeout_s
    read_timeout_s: float = 360.0  # no byte for this long = a stale stream
    connect_timeout_s: float = 10.0
    max_errors: int = 3  # consecutive empty failures before also polling
    poll_interval_s: float = 4.0  # while polling: a list, then a watch attempt, this often
    backoff_s: float = 1.0
    backoff_cap_s: float = 3.0  # a recovered API is noticed within this (goal: 5 s)
    healthy_s: float = 10.0  # a stream that lasted this long was no failure, events or not

    def backoff(self, errors: int) -> float:
        return RetryPolicy(base_s=self.backoff_s, max_s=self.backoff_cap_s).delay(errors)

    @property
    def request_timeout(self) -> tuple[float, float]:
        return (self.connect_timeout_s, self.read_timeout_s)


def status_of(exc: BaseException) -> int | None:
    return exc.status if isinstance(exc, ApiException) else None


class WatchError(RuntimeError):
    """An ERROR event other than 410 inside a watch stream."""


class ObjectWatch:
    """Keeps ``objects`` (name → object dict) current; calls ``on_change`` after each change."""

    def __init__(self, label: str, lister: Lister, on_change: Callable[[], None],
                 settings: WatchSettings | None = None,
                 warn: Callable[[str], None] | None = None,
                 observe: Callable[[Obj], None] | None = None) -> None:
        self.label, self.lister, self.on_change = label, lister, on_change
        self.observe = observe or (lambda _obj: None)  # sees every version of every object
        self.settings = settings or WatchSettings()
        self.warn = warn or log.warning
        self.objects: dict[str, Obj] = {}
        self.deleted: set[str] = set()
        self.synced = threading.Event()  # the first list has arrived
        self.errors = self.relists = 0
        self.polling = False
        self.rv: str | None = None  # the last version delivered: where a new stream resumes
        self.last_error = ""  # the latest failure while it lasts ("" once a stream is good)
        # a 403: no retry will get past it, so the watch's owner ends the stage on it
        # (watch/forbidden.py); the watch itself keeps trying, as for any error
        self.denied: Denied | None = None
        self._delivered, self._lasted = 0, 0.0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._response: Any = None
        # in the caller's context: ``warn`` may be the stage logger (the run's Prefect API)
        self._thread = context_thread(self._run, name=f"watch-{label}")

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

    def catch_up(self, live: list[Obj], within_s: float) -> bool:
        """Wait until the copies are ``live``, a list just read with this watch's own
        selector (the same objects at the same resourceVersion): every version the stream
        had to deliver up to that read has then been delivered, and seen by ``observe``.
        False when that has not happened within ``within_s``."""
        want, deadline = _versions(live), time.monotonic() + within_s
        while _versions(self.snapshot()) != want:
            if time.monotonic() >= deadline or self._stop.wait(0.05):
                return False
        return True

    def read_now(self) -> list[Obj] | None:
        """The objects as the API serves them now (one list with the watch's own selector),
        None when the read fails; the watch's copies are left as they are."""
        try:
            response = self.lister(_preload_content=False, _request_timeout=self.settings.request_timeout)
            return list(json.loads(response.data).get("items") or [])
        except Exception as exc:
            self.denied = denied_by(exc) or self.denied
            return None

    def await_gone(self, names: set[str], within_s: float) -> bool:
        """Wait until the watch no longer holds any of ``names``, objects a live read no
        longer found: it has then delivered their deletion, and every version before it
        (a pod's last status, with the cause of its end) has been seen by ``observe``, as
        a stream delivers in order. False when that has not happened within ``within_s``."""
        deadline = time.monotonic() + within_s
        while True:
            with self._lock:
                if not names & self.objects.keys():
                    return True
            if time.monotonic() >= deadline or self._stop.wait(0.05):
                return False

    def _run(self) -> None:
        streak = 0
        while not self._stop.is_set():
            try:
                if self.rv is None:
                    self.rv = self._relist()
                self._stream()
                streak, self.last_error = 0, ""
                continue
            except Exception as exc:  # a watch error alone never fails the stage
                if self._stop.is_set():
                    return
                self.errors += 1
                self.last_error = short_error(exc)
                self.denied = denied_by(exc) or self.denied
                if status_of(exc) == 410:
                    self.rv = None
                if self._delivered or self._lasted >= self.settings.healthy_s:
                    streak = 0  # progress was made: resume from self.rv at once
                    log.debug("watch %s: broke after %d events (%s); resuming from %s",
                              self.label, self._delivered, self.last_error, self.rv)
                    wait = min(self.settings.backoff_s, 0.2)
                else:
                    streak += 1
                    wait = self._after_failure(streak, exc)
            if self._stop.wait(wait):
                return

    def _after_failure(self, streak: int, exc: BaseException) -> float:
        """Log once per streak step; past ``max_errors`` also list, so the state stays fresh
        while watches fail, and try a watch again after ``poll_interval_s``."""
        if streak < self.settings.max_errors:
            self.warn(f"watch {self.label}: {short_error(exc)}; reconnecting")
            return self.settings.backoff(streak)
        if not self.polling:
            self.polling = True
            self.warn(f"watch {self.label}: {streak} errors in a row, polling every "
                      f"{self.settings.poll_interval_s:g} s and retrying the watch until it "
                      f"recovers ({short_error(exc)})")
        try:
            self.rv = self._relist()
        except Exception as again:
            self.errors += 1
            self.last_error = short_error(again)
            self.denied = denied_by(again) or self.denied
            if status_of(again) == 410:
                self.rv = None
        return self.settings.poll_interval_s

    def _relist(self) -> str:
        response = self.lister(_preload_content=False, _request_timeout=self.settings.request_timeout)
        data = json.loads(response.data)
        with self._lock:
            fresh = {o["metadata"]["name"]: o for o in data.get("items") or []}
            self.deleted |= set(self.objects) - set(fresh)
            self.objects = fresh
        self.relists += 1
        for obj in fresh.values():
            self.observe(obj)
        self.synced.set()
        self.on_change()
        return str(data["metadata"]["resourceVersion"])

    def _stream(self) -> None:
        """One watch request from ``self.rv``, which advances with every event delivered (so
        a break keeps the position); a 410 ERROR event sets it to None (relist)."""
        self._delivered, self._lasted, began = 0, 0.0, time.monotonic()
        response = self.lister(watch=True, resource_version=self.rv, allow_watch_bookmarks=True,
                               timeout_seconds=self.settings.timeout_s, _preload_content=False,
                               _request_timeout=self.settings.request_timeout)
        self._response = response
        if self.polling:  # the server answers watches again
            self.polling = False
            self.warn(f"watch {self.label}: recovered, watching again")
        try:
            for line in iter_resp_lines(response):
                if self._stop.is_set():
                    return
                if not line.strip():
                    continue
                event = json.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        self.rv = None
                        return
                    raise WatchError(f"{obj.get('code')} {obj.get('reason')}: "
                                     f"{obj.get('message')}")
                if kind != "BOOKMARK":
                    self._apply(kind, obj)
                self.rv = str(obj.get("metadata", {}).get("resourceVersion") or self.rv)
                self._delivered += 1
        finally:
            self._lasted = time.monotonic() - began
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
        self.observe(obj)
        self.on_change()


def _versions(objects: list[Obj]) -> dict[str, str]:
    return {o["metadata"]["name"]: str(o["metadata"].get("resourceVersion")) for o in objects}
