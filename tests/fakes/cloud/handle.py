"""The test-side handle on the fake cloud: where its executables are, the Cluster Toolkit
bundle that ships the fake gcluster, and reading back what the fakes recorded."""

from __future__ import annotations

import io
import json
import sys
import tarfile
from pathlib import Path
from typing import Any

from tests.fakes.cloud.apis import FakeGoogleApis

HERE = Path(__file__).parent
BIN = HERE / "bin"  # the fake gcloud/gcluster, put first on PATH
BLUEPRINT_FIXTURE = HERE / "gke-tpu-v6e-advanced.yaml"


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
