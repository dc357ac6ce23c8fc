"""The test-side handle on the fake cloud: where its executables are, the Cluster Toolkit
bundle that ships the fake gcluster, and reading back what the fakes recorded."""

from __future__ import annotations

import functools
import io
import json
import os
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from tests.fakes.cloud.apis import FakeGoogleApis

HERE = Path(__file__).parent
BIN = HERE / "bin"  # the fake gcloud/gcluster, put first on PATH
BLUEPRINT_FIXTURE = HERE / "gke-tpu-v6e-advanced.yaml"


@functools.cache
def _python3_dir() -> Path:
    """A folder whose one entry, ``python3``, is this interpreter's base (the venv's
    interpreter without the venv): the fake gcloud's ``#!/usr/bin/env python3`` then starts
    that interpreter at once. Where ``python3`` is a pyenv shim, the shim's bash and pyenv
    cost about 0.15 s of CPU and a second of wall on every call, more than the fake itself.
    The fakes use the standard library only. Made once per process, under the temporary
    directory, and removed at exit."""
    import atexit
    import shutil

    folder = Path(tempfile.mkdtemp(prefix="tpurl-fake-cloud-python-"))
    (folder / "python3").symlink_to(getattr(sys, "_base_executable", sys.executable))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def fake_path(path: str | None = None) -> str:
    """PATH (this process's unless given) with the fake gcloud/gcluster first and the
    interpreter they run under next (``_python3_dir``)."""
    rest = os.environ.get("PATH", "") if path is None else path
    return os.pathsep.join([str(BIN), str(_python3_dir()), rest])


def build_bundle(dest: Path, blueprint: Path = BLUEPRINT_FIXTURE) -> Path:
    """A gcluster_bundle_linux_amd64.tgz of the real layout: gcluster + examples/."""
    def add(tar: tarfile.TarFile, name: str, data: bytes, mode: int) -> None:
        info = tarfile.TarInfo(name)
        info.size, info.mode = len(data), mode
        tar.addfile(info, io.BytesIO(data))

    # run by this interpreter: the fake reads the blueprint with ruamel (gcluster_expand.py)
    wrapper = f'#!/bin/sh\nexec "{sys.executable}" "{BIN / "gcluster"}" "$@"\n'.encode()
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
