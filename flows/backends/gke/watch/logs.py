"""The coordinator's log: followed into the stage logger, redacted, kept in full at log_uri.

Why here and not `kubectl logs -f`: logs vanish with the pod (its TTL, a preemption),
so the flow keeps its own copy, and a dropped stream must neither lose nor repeat lines. The
follower asks for timestamps and, after a disconnect, resumes with ``sinceSeconds`` reaching a
margin before the last line it kept (the Python client has no ``sinceTime``; the margin
absorbs clock skew between the flow and the API server), then drops every line it has already
seen: anything older than the last kept timestamp, and exact (timestamp, text) repeats.
Every line passes the Redactor before it is logged, kept or diagnosed.
"""

from __future__ import annotations

import contextlib
import math
import re
import threading
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from kubernetes.watch.watch import iter_resp_lines

from flows.backends.gke.watch.forbidden import Denied, denied_by
from flows.common.api_objects import Obj
from flows.common.threads import context_thread
from flows.core.program_log import ProgramLines
from flows.core.retry import RetryPolicy
from flows.core.secrets import Redactor
from flows.core.stage import StageLogger
from flows.core.storage import Storage

TAIL_LINES = 60
_STAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?Z$")


def parse_stamp(text: str) -> tuple[datetime, int] | None:
    """An RFC3339Nano timestamp as (whole second, nanoseconds); None if it is not one."""
    m = _STAMP.match(text)
    if not m:
        return None
    second = datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC)
    return second, int((m.group(2) or "0").ljust(9, "0")[:9])


def split_line(raw: str) -> tuple[tuple[datetime, int] | None, str]:
    stamp, _, text = raw.partition(" ")
    parsed = parse_stamp(stamp)
    return (parsed, text) if parsed else (None, raw)


class LogSink:
    """Where followed lines go: the stage logger, a tail for the diagnosis, the full copy."""

    def __init__(self, name: str, logger: StageLogger, redactor: Redactor, storage: Storage,
                 log_uri: str, progress: Callable[[str], None] | None = None,
                 progress_regex: str | None = None) -> None:
        self.name, self.logger, self.redactor = name, logger, redactor
        self.shown = ProgramLines(name, progress_regex)  # the rest is in the kept log only
        self.storage, self.log_uri, self.progress = storage, log_uri, progress
        self.lines: list[str] = []
        self.tail: deque[str] = deque(maxlen=TAIL_LINES)
        self._lock = threading.Lock()

    def add(self, raw: str) -> None:
        line = self.redactor(raw)
        with self._lock:
            self.lines.append(line)
            self.tail.append(line)
            shown = self.shown.keep(line)
        if shown:
            self.logger.info("[%s] %s", self.name, line)
        if self.progress:
            self.progress(line)

    def note(self, text: str) -> None:
        """A line of our own (resubmission, reattach) in the kept log, marked as such."""
        with self._lock:
            self.lines.append(f"--- tpurl: {self.redactor(text)}")

    def tail_lines(self) -> list[str]:
        with self._lock:
            return list(self.tail)

    def save(self) -> None:
        """Write the full log to log_uri; a storage error is logged, never raised (the log is
        evidence, and losing it must not hide the stage's real outcome)."""
        with self._lock:
            text = "\n".join(self.lines) + ("\n" if self.lines else "")
        try:
            self.storage.write_text(self.log_uri, text)
        except Exception as exc:
            self.logger.warning("log not kept at %s: %s", self.log_uri, self.redactor(str(exc)))
            return
        with self._lock:
            ending = self.shown.ending(self.log_uri)
        for text in ending:
            self.logger.info("%s", text)


class LogFollower:
    """Follows one container of the current coordinator pod, surviving disconnects.

    ``pod()`` returns the coordinator pod as the pod watch last saw it (or None); ``wake``
    is set when it may have changed. A new pod (new uid: a restarted JobSet) starts a new
    stream from its beginning.
    """

    def __init__(self, core: Any, namespace: str, container: str, pod: Callable[[], Obj | None],
                 sink: LogSink, wake: threading.Event, read_timeout_s: float = 300.0,
                 retry_s: float = 5.0, resume_margin_s: int = 30) -> None:
        self.core, self.namespace, self.container = core, namespace, container
        self.pod, self.sink, self.wake = pod, sink, wake
        self.read_timeout_s, self.retry_s = read_timeout_s, retry_s
        self.resume_margin_s = resume_margin_s
        self._uid: str | None = None
        self._last: tuple[datetime, int] | None = None
        self._seen: set[tuple[tuple[datetime, int], str]] = set()
        self._finished_uid: str | None = None
        self.denied: Denied | None = None  # a 403 (watch/forbidden.py): ends the stage
        self._stop = threading.Event()
        self._response: Any = None
        # in the caller's context: the stage logger sends to the run's Prefect API
        self._thread = context_thread(self._run, name="log-follower")

    def start(self) -> LogFollower:
        self._thread.start()
        return self

    def stop(self, join_s: float = 2.0) -> None:
        self._stop.set()
        self.wake.set()
        if (response := self._response) is not None:
            with contextlib.suppress(Exception):
                response.shutdown()
        self._thread.join(join_s)

    def drained(self) -> bool:
        """The current pod's container has ended and its stream was read to the end."""
        return self._uid is not None and self._finished_uid == self._uid

    def wait_drained(self, timeout_s: float) -> bool:
        deadline = threading.Event()
        waited = 0.0
        while not self.drained() and waited < timeout_s:
            deadline.wait(0.05)
            waited += 0.05
        return self.drained()

    def _run(self) -> None:
        streak = 0
        while not self._stop.is_set():
            pod = self.pod()
            state = container_state(pod, self.container) if pod else ""
            uid = pod["metadata"]["uid"] if pod else None
            if pod is None or state in ("", "waiting") or uid == self._finished_uid:
                self.wake.wait(1.0)
                self.wake.clear()
                continue
            if uid != self._uid:
                self._uid, self._last, self._seen = uid, None, set()
            try:
                got = self._follow(pod["metadata"]["name"])
                if container_state(self.pod() or pod, self.container) == "terminated":
                    self._finished_uid = uid
                    continue
                streak = 0 if got else streak + 1
            except Exception as exc:  # reconnect below; the watches decide the outcome
                if self._stop.is_set():
                    return
                self.denied = denied_by(exc) or self.denied
                streak += 1
            # quick after a cut (lines may still come), slower while the API keeps failing;
            # a pod change (e.g. the container terminated) wakes it at once
            self.wake.wait(RetryPolicy(base_s=0.1, max_s=self.retry_s).delay(streak + 1))
            self.wake.clear()

    def _follow(self, pod_name: str) -> int:
        """One log request, read to its end; returns how many new lines it brought."""
        since = None
        if self._last is not None:
            behind = (datetime.now(UTC) - self._last[0]).total_seconds()
            since = max(1, math.ceil(behind) + self.resume_margin_s)
        response = self.core.read_namespaced_pod_log(
            pod_name, self.namespace, container=self.container, follow=True, timestamps=True,
            since_seconds=since, _preload_content=False,
            _request_timeout=(10, self.read_timeout_s))
        self._response = response
        got = 0
        try:
            for raw in iter_resp_lines(response):
                if self._stop.is_set():
                    break
                got += self._take(raw)
            return got
        finally:
            self._response = None
            response.release_conn()

    def _take(self, raw: str) -> int:
        stamp, text = split_line(raw)
        if stamp is not None:
            if self._last is not None and stamp < self._last:
                return 0
            if (stamp, text) in self._seen:
                return 0
            if self._last is None or stamp[0] > self._last[0]:
                self._seen = set()  # only lines of the newest second can come again
            self._seen.add((stamp, text))
            self._last = stamp
        self.sink.add(text)
        return 1


def container_state(pod: Obj | None, container: str) -> str:
    for status in ((pod or {}).get("status") or {}).get("containerStatuses") or []:
        if status.get("name") == container:
            return next(iter(status.get("state") or {"": None}))
    return ""
