"""An in-process fake of the Kubernetes API, served over HTTP so the real `kubernetes` client
talks to it and fails the way it fails against a real API server.

Why HTTP and not a mock of the client: the behaviours the GKE backend must survive live in the
wire protocol (chunked watch streams cut mid-way, ERROR events carrying 410 Gone, 409 on
create, 503 bursts, log streams resumed with sinceTime). Mocking the client would only test
our guesses about it.

What it implements (only what the backend uses, the way the real server does it):
- pods, secrets, configmaps (core/v1; an immutable one refuses changes with 422, and one
  over 1 MiB of data is refused, as the API server validates them), jobs (batch/v1),
  jobsets (jobset.x-k8s.io/v1alpha2), workloads
  (kueue.x-k8s.io at the versions ``served`` lists, 404 at any other; GET /apis lists
  them as discovery does): create (409 AlreadyExists), get, list, replace, delete (Foreground
  keeps the object with a deletionTimestamp until its dependents are gone), watch.
- resourceVersion: one cluster-wide counter; every write bumps it; watch from an RV replays
  later events; an RV older than the retained history gets an ERROR event with 410 Gone.
- label and field (metadata.name) selectors; watch timeoutSeconds; BOOKMARK events.
- pod logs: container=, follow=, sinceSeconds=, timestamps=;
  400 while the container waits to start.
- faults: ``fail_next(n)`` (5xx bursts), ``drop_watch_every`` (cut streams after N events),
  ``drop_log_every`` (cut log streams after N lines).
- RBAC: with ``rbac_rules`` set (a Role's rules, beside ``rbac_cluster_rules``), a request
  they do not grant gets the API server's 403 (tests/fakes/kube_api/rbac.py), core and
  custom resources alike; every request's (group, resource[/subresource], verb) is recorded
  in ``calls``, the refused ones in ``denied``.
Controllers are not simulated; a scenario (scripts of timed actions in the tests) drives state
with the helpers in tests/fakes/kube_api/scenarios.py, as Kueue and JobSet would.
"""

from __future__ import annotations

import contextlib
import copy
import json
import re
import socket
import threading
import time
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

from tests.fakes.kube_api.rbac import allowed, attributes, forbidden
from tests.fakes.kube_api.store import KINDS, ApiError, FakeKube, Obj, matches
from tests.support.net import send_json

_CORE = re.compile(r"^/api/v1/namespaces/([^/]+)/([a-z]+)(?:/([^/]+))?(/log)?$")
# Cluster-scoped core resources (nodes) live at /api/v1/<plural>[/<name>], without a namespace
# (kubernetes staging/src/k8s.io/apiserver/pkg/endpoints/installer.go: namespaced resources get
# the namespaces/{namespace} prefix, the others not); the store keeps them under namespace "".
_CORE_CLUSTER = re.compile(r"^/api/v1/(nodes)(?:/([^/]+))?$")
_GROUP = re.compile(r"^/apis/([^/]+)/([^/]+)/namespaces/([^/]+)/([a-z]+)(?:/([^/]+))?$")
_GROUP_VERSION = re.compile(r"^/apis/([^/]+)/([^/]+)/?$")  # discovery of one group version
_CLUSTER_SCOPED = re.compile(r"^/apis/([^/]+)/([^/]+)/([a-z]+)(?:/([^/]+))?$")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    kube: FakeKube

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _send(self, code: int, body: Obj, retry_after: float | None = None) -> None:
        send_json(self, code, body,
                  {"Retry-After": f"{retry_after:g}"} if retry_after is not None else None)

    def _body(self) -> Obj:
        return json.loads(self._raw) if self._raw else {}

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def _dispatch(self, method: str) -> None:
        kube = self.kube
        url = urlparse(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        length = int(self.headers.get("Content-Length") or 0)
        self._raw = self.rfile.read(length) if length else b""  # always: keep-alive framing
        with kube.cond:
            kube.requests.append((time.monotonic(), method, self.path))
        try:
            if (failure := kube.take_failure(self.path)) is not None:
                status, retry_after = failure
                reason, message = ((
                    "TooManyRequests", "Too many requests, please try again later.")
                    if status == 429 else ("ServiceUnavailable", "the server is currently "
                                           "unable to handle the request"))
                return self._send(status, ApiError(status, reason, message).status(),
                                  retry_after)
            if m := _CORE.match(url.path):
                ns, plural, name, log = m.groups()
                group = ""
            elif m := _CORE_CLUSTER.match(url.path):
                ns, (plural, name), group, log = "", m.groups(), "", None
            elif m := _GROUP.match(url.path):
                group, version, ns, plural, name = m.groups()
                log = None
                if version not in kube.served.get(group, ()):
                    raise ApiError(404, "NotFound", "the server could not find the requested "
                                   "resource")
            elif url.path in ("/apis", "/apis/") and method == "GET":
                return self._send(200, self._discovery())
            elif (m := _GROUP_VERSION.match(url.path)) and method == "GET":
                group, version = m.groups()
                if version not in kube.served.get(group, ()):
                    raise ApiError(404, "NotFound", "the server could not find the requested "
                                   "resource")
                return self._send(200, {"kind": "APIResourceList", "apiVersion": "v1",
                                        "groupVersion": f"{group}/{version}", "resources": [
                                            {"name": p, "kind": k} for p, (gv, k) in
                                            KINDS.items() if gv.startswith(f"{group}/")]})
            elif m := _CLUSTER_SCOPED.match(url.path):
                group, version, plural, name = m.groups()
                ns, log = "", None
                if version not in kube.served.get(group, ()):
                    raise ApiError(404, "NotFound", "the server could not find the requested "
                                   "resource")
            else:
                raise ApiError(404, "NotFound", f"no route for {url.path}")
            self._authorize(method, group, plural, ns, name, "log" if log else None, query)
            if log:
                return self._logs(ns, name, query)
            if plural not in KINDS:
                raise ApiError(404, "NotFound", f"the server could not find {plural}")
            self._resource(method, plural, ns, name, query)
        except ApiError as err:
            self._send(err.code, err.status())
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _discovery(self) -> Obj:
        """GET /apis: the APIGroupList (non-resource; the system:discovery ClusterRole grants
        it to every authenticated user, so it is not subject to the Role)."""
        groups = [{"name": g, "versions": [{"groupVersion": f"{g}/{v}", "version": v}
                                           for v in versions],
                   "preferredVersion": {"groupVersion": f"{g}/{versions[0]}",
                                        "version": versions[0]}}
                  for g, versions in sorted(self.kube.served.items())]
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}

    def _authorize(self, method: str, group: str, plural: str, ns: str, name: str | None,
                   subresource: str | None, query: dict[str, str]) -> None:
        """Authorization runs before the resource is looked up, as in the API server's
        handler chain (WithAuthorization precedes the REST storage)."""
        kube = self.kube
        attrs = attributes(method, group, plural, ns, name, subresource, query)
        with kube.cond:
            kube.calls.add(attrs.call)
            if kube.rbac_rules is None:
                return
            # a ClusterRole's rules apply everywhere, a Role's only in its namespace
            rules = [*kube.rbac_cluster_rules, *(kube.rbac_rules if ns else [])]
            if allowed(rules, attrs):
                return
            kube.denied.add(attrs.call)
        raise forbidden(kube.rbac_user, attrs)

    def _resource(self, method: str, plural: str, ns: str, name: str | None,
                  query: dict[str, str]) -> None:
        kube = self.kube
        if method == "POST" and name is None:
            return self._send(201, kube.create(plural, ns, self._body()))
        if method == "PUT" and name:
            return self._send(200, kube.replace(plural, ns, name, self._body()))
        if method == "DELETE" and name:
            body = self._body()
            policy = body.get("propagationPolicy") or query.get("propagationPolicy") or "Background"
            return self._send(200, kube.delete(plural, ns, name, policy))
        if method == "GET" and name:
            return self._send(200, kube.get(plural, ns, name))
        if method == "GET":
            if query.get("watch") in ("true", "1", "True"):
                return self._watch(plural, ns, query)
            with kube.cond:
                items = [copy.deepcopy(o) for (p, n, _), o in sorted(kube.objects.items())
                         if p == plural and n == ns and matches(
                             o, query.get("labelSelector"), query.get("fieldSelector"))]
                rv = kube.rv
                kube.listed.add((plural, query.get("labelSelector") or ""))
                kube.cond.notify_all()
            api_version, kind = KINDS[plural]
            return self._send(200, {"apiVersion": api_version, "kind": f"{kind}List",
                                    "metadata": {"resourceVersion": str(rv)}, "items": items})
        raise ApiError(405, "MethodNotAllowed", f"{method} not allowed here")

    def _start_stream(self, content_type: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _cut(self) -> None:
        """Drop the connection mid-stream, with no terminating chunk (a dead load balancer)."""
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)

    def _watch(self, plural: str, ns: str, query: dict[str, str]) -> None:
        kube = self.kube
        labels, fields = query.get("labelSelector"), query.get("fieldSelector")
        deadline = time.monotonic() + float(query.get("timeoutSeconds") or 1800)
        start_rv = query.get("resourceVersion") or ""
        self._start_stream("application/json")
        pending: list[Obj] = []
        with kube.cond:
            if start_rv not in ("", "0") and int(start_rv) < kube.history_floor:
                gone = ApiError(410, "Expired", f"too old resource version: {start_rv} "
                                f"({kube.history_floor})").status()
                self._chunk(json.dumps({"type": "ERROR", "object": gone}).encode() + b"\n")
                return self._end_stream()
            if start_rv in ("", "0"):
                pending = [{"type": "ADDED", "object": copy.deepcopy(o)}
                           for (p, n, _), o in sorted(kube.objects.items())
                           if p == plural and n == ns and matches(o, labels, fields)]
                cursor = kube.rv
                kube.listed.add((plural, labels or ""))
                kube.cond.notify_all()
            else:
                cursor = int(start_rv)
        sent, generation = 0, kube.cut_generation
        while True:
            if kube.cut_generation != generation:
                return self._cut()
            for event in pending:
                self._chunk(json.dumps(event).encode() + b"\n")
                sent += 1
                if kube.drop_watch_every and sent >= kube.drop_watch_every:
                    return self._cut()
            with kube.cond:
                if kube.closed:
                    return self._cut()
                if plural in kube.held_watches:  # lagging: nothing delivered, cursor kept
                    pending = []
                    kube.cond.wait(timeout=0.05)
                    continue
                remaining = deadline - time.monotonic()
                pending = [{"type": t, "object": copy.deepcopy(o)} for rv, p, t, o in kube.history
                           if rv > cursor and p == plural and o["metadata"]["namespace"] == ns
                           and matches(o, labels, fields)]
                if not pending and remaining <= 0:
                    if query.get("allowWatchBookmarks") in ("true", "True"):
                        mark = {"kind": KINDS[plural][1], "apiVersion": KINDS[plural][0],
                                "metadata": {"resourceVersion": str(kube.rv)}}
                        self._chunk(json.dumps({"type": "BOOKMARK", "object": mark}).encode()
                                    + b"\n")
                    return self._end_stream()
                cursor = kube.rv
                if not pending:
                    kube.cond.wait(timeout=min(0.5, max(remaining, 0.01)))

    def _logs(self, ns: str, pod_name: str, query: dict[str, str]) -> None:
        kube = self.kube
        container = query.get("container", "")
        pod = kube.get("pods", ns, pod_name)
        if _container_state(pod, container) in ("", "waiting"):
            raise ApiError(400, "BadRequest", f'container "{container}" in pod "{pod_name}" '
                           "is waiting to start: ContainerCreating")
        since = query.get("sinceSeconds")
        floor = datetime.now(UTC) - timedelta(seconds=int(since)) if since else None
        stamps = query.get("timestamps") in ("true", "True")
        follow = query.get("follow") in ("true", "True")
        self._start_stream("text/plain")
        index = 0
        while True:
            with kube.cond:
                entries = kube.logs.get((ns, pod_name, container), [])
                batch = entries[index:]
                index = len(entries)
                obj = kube.objects.get(("pods", ns, pod_name))
                done = (obj is None or obj["metadata"]["uid"] != pod["metadata"]["uid"]
                        or _container_state(obj, container) == "terminated" or kube.closed)
            for offset, (stamp, line) in enumerate(batch):
                if floor and stamp < floor:
                    continue
                prefix = stamp.strftime("%Y-%m-%dT%H:%M:%S.%f") + "000Z " if stamps else ""
                self._chunk((prefix + line + "\n").encode())
                position = index - len(batch) + offset
                last_cut = kube.log_cut_at.get(pod_name, -1)
                if kube.drop_log_every and position >= last_cut + kube.drop_log_every:
                    kube.log_cut_at[pod_name] = position
                    return self._cut()
            if not follow or (done and not batch):
                return self._end_stream()
            with kube.cond:
                if len(kube.logs.get((ns, pod_name, container), [])) == index:
                    kube.cond.wait(timeout=0.2)


def _container_state(pod: Obj, container: str) -> str:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status.get("name") == container:
            return next(iter(status.get("state") or {"": None}))
    return ""


class FakeApiServer:
    """``FakeKube`` served on 127.0.0.1:<free port>; ``configuration()`` for the client."""

    def __init__(self, kube: FakeKube | None = None) -> None:
        self.kube = kube or FakeKube()
        handler = type("Handler", (_Handler,), {"kube": self.kube})
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> FakeApiServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        with self.kube.cond:
            self.kube.closed = True
            self.kube.cond.notify_all()
        self.httpd.shutdown()
        self.httpd.server_close()
