"""ObjectWatch against the fake API: resumes, relists on 410, polls after repeated errors."""

from __future__ import annotations

import functools
import time

from flows.backends.gke.watch.client import JOBSET_GROUP, JOBSET_VERSION, JOBSETS
from flows.backends.gke.watch.stream import ObjectWatch, WatchSettings
from tests.fakes.kube_api import FakeApiServer
from tests.support.cluster import cluster_at
from tests.support.polling import bare_jobset, until

SETTINGS = WatchSettings(timeout_s=1, read_timeout_s=3, connect_timeout_s=1, max_errors=2,
                         poll_interval_s=0.2, backoff_s=0.05, backoff_cap_s=0.1)


def watch_of(server: FakeApiServer, warnings: list[str]) -> ObjectWatch:
    custom = cluster_at(server.url).custom
    lister = functools.partial(custom.list_namespaced_custom_object, JOBSET_GROUP, JOBSET_VERSION,
                               "default", JOBSETS)
    return ObjectWatch("jobsets", lister, lambda: None, SETTINGS, warnings.append)


def test_sees_changes_and_deletions_across_server_timeouts(server: FakeApiServer) -> None:
    warnings: list[str] = []
    watch = watch_of(server, warnings).start()
    try:
        assert until(watch.synced.is_set)
        server.kube.create("jobsets", "default", bare_jobset("a"))
        assert until(lambda: watch.get("a") is not None)
        time.sleep(1.3)  # the server ends the watch (timeoutSeconds=1): it resumes
        server.kube.delete("jobsets", "default", "a")
        assert until(lambda: watch.get("a") is None and "a" in watch.deleted)
        assert watch.relists == 1 and watch.errors == 0 and warnings == []
    finally:
        watch.stop()


def test_410_gone_relists(server: FakeApiServer) -> None:
    watch = watch_of(server, []).start()
    try:
        assert until(watch.synced.is_set)
        server.kube.compact()
        server.kube.create("jobsets", "default", bare_jobset("b"))  # newer than the floor: seen
        assert until(lambda: watch.get("b") is not None)
        server.kube.compact()
        server.kube.cut_watches()  # resumes from an RV that is now too old → 410 → relist
        server.kube.create("jobsets", "default", bare_jobset("c"))
        assert until(lambda: watch.get("c") is not None and watch.relists >= 2)
    finally:
        watch.stop()


def test_repeated_errors_fall_back_to_polling_then_recover(server: FakeApiServer) -> None:
    warnings: list[str] = []
    server.kube.fail_next(5)
    watch = watch_of(server, warnings).start()
    try:
        assert until(watch.synced.is_set)  # never raised; got there by polling
        assert watch.errors >= 2 and any("polling" in w for w in warnings)
        server.kube.create("jobsets", "default", bare_jobset("d"))
        assert until(lambda: watch.get("d") is not None)
        assert until(lambda: not watch.polling)  # back to watching after good polls
    finally:
        watch.stop()


def test_catch_up_waits_for_every_version_up_to_a_live_read(server: FakeApiServer) -> None:
    """The stream lags (the fake holds its events): a live read already has the object
    deleted, the copies still the first version. ``catch_up`` returns once the stream has
    delivered the changes and the deletion, with ``observe`` having seen each version, and
    says False when the stream never catches up within its bound."""
    custom = cluster_at(server.url).custom
    lister = functools.partial(custom.list_namespaced_custom_object, JOBSET_GROUP,
                               JOBSET_VERSION, "default", JOBSETS)
    seen: list[str] = []
    watch = ObjectWatch("jobsets", lister, lambda: None, SETTINGS, print,
                        observe=lambda o: seen.append(o["metadata"]["resourceVersion"]))
    watch.start()
    try:
        assert until(watch.synced.is_set)
        server.kube.create("jobsets", "default", bare_jobset("e"))
        assert until(lambda: watch.get("e") is not None)
        with server.kube.cond:
            server.kube.held_watches.add("jobsets")
        server.kube.mutate("jobsets", "default", "e", lambda o: o.setdefault("status", {}))
        server.kube.delete("jobsets", "default", "e")
        server.kube.create("jobsets", "default", bare_jobset("f"))
        live = lister()["items"]
        assert not watch.catch_up(live, 0.3)  # held: the copies still have the first "e"
        with server.kube.cond:
            server.kube.held_watches.discard("jobsets")
        assert watch.catch_up(live, 10.0)
        assert [o["metadata"]["name"] for o in watch.snapshot()] == ["f"]
        assert len(seen) >= 4  # e added, e changed, e deleted, f added
    finally:
        watch.stop()
