"""Output storage addressed by URI: ``file://`` in the rehearsal, ``gs://`` on GCP.

Stages only speak URIs, so the same stage code decides skip/verify on a laptop and on GCS.
The GCS implementation lives with the GKE backend (flows/backends/gke/gcs.py);
``flows.backends.storage_for`` picks one by URI scheme.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Protocol
from urllib.parse import urlparse


class Storage(Protocol):
    def exists(self, uri: str) -> bool: ...
    def read_text(self, uri: str) -> str | None: ...
    def write_text(self, uri: str, text: str) -> None: ...
    def children(self, uri: str) -> list[str]: ...
    def files_under(self, uri: str) -> list[str]: ...
    def read_bytes(self, uri: str) -> bytes | None: ...
    def local_path(self, uri: str) -> Path | None: ...


def join(base: str, *parts: str) -> str:
    out = base.rstrip("/")
    for part in parts:
        out += "/" + part.strip("/")
    return out


def file_uri(path: str | Path) -> str:
    return "file://" + os.path.abspath(path)


def program_path(uri: str) -> str:
    """MaxText takes local directories as plain paths and GCS locations as gs:// URIs."""
    parsed = urlparse(uri)
    return parsed.path if parsed.scheme == "file" else uri


class LocalStorage:
    """``file://`` URIs on the local disk."""

    def _path(self, uri: str) -> Path:
        parsed = urlparse(uri)
        if parsed.scheme != "file":
            raise ValueError(f"local storage got a non-file URI: {uri}")
        return Path(parsed.path)

    def local_path(self, uri: str) -> Path | None:
        return self._path(uri)

    def exists(self, uri: str) -> bool:
        return self._path(uri).exists()

    def read_text(self, uri: str) -> str | None:
        path = self._path(uri)
        return path.read_text() if path.is_file() else None

    def write_text(self, uri: str, text: str) -> None:
        path = self._path(uri)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text)
        tmp.replace(path)  # atomic: a reader never sees half a lineage record

    def children(self, uri: str) -> list[str]:
        path = self._path(uri)
        return sorted(p.name for p in path.iterdir()) if path.is_dir() else []

    def files_under(self, uri: str) -> list[str]:
        path = self._path(uri)
        return sorted(file_uri(p) for p in path.rglob("*") if p.is_file()) if path.is_dir() else []

    def read_bytes(self, uri: str) -> bytes | None:
        path = self._path(uri)
        return path.read_bytes() if path.is_file() else None
