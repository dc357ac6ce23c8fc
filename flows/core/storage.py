"""Output storage addressed by URI: ``file://`` in the rehearsal, ``gs://`` on GCP.

Stages only speak URIs, so the same stage code decides skip/verify on a laptop and on GCS.
The GCS implementation lives with the GKE backend (flows/backends/gke/gcs.py); a stage
reaches either through its backend's ``storage``.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol
from urllib.parse import urlparse

from flows.common.paths import file_uri
from flows.core.safe_writes import write_text


@dataclass(frozen=True)
class FileStat:
    """One file as a listing shows it: ``digest`` when the storage keeps one (GCS crc32c),
    ``stamp`` changes whenever the file is rewritten (mtime, or the GCS generation)."""

    size: int
    stamp: str
    digest: str | None = None


class Storage(Protocol):
    def exists(self, uri: str) -> bool: ...
    def read_text(self, uri: str) -> str | None: ...
    def write_text(self, uri: str, text: str) -> None: ...
    def create_text(self, uri: str, text: str) -> bool:
        """Write ``uri`` only if nothing is there, atomically; False (nothing written) when
        something is: a record two writers may race for is never overwritten."""
        ...
    def children(self, uri: str) -> list[str]: ...
    def files_under(self, uri: str) -> list[str]: ...
    def read_bytes(self, uri: str) -> bytes | None: ...
    def local_path(self, uri: str) -> Path | None: ...
    def stat_tree(self, uri: str) -> dict[str, FileStat]:
        """Every file at or below ``uri`` by relative name (``""``: ``uri`` is a file)."""
        ...
    def digest(self, uri: str) -> str: ...
    def read_tail(self, uri: str, size: int) -> bytes | None:
        """The last ``size`` bytes of a file (all of it when smaller), None if absent."""
        ...
    def prune_empty(self, uri: str) -> int:
        """Remove directories at or below ``uri`` that hold no file (GCS has none)."""
        ...
    def remove_tree(self, uri: str, keep: tuple[str, ...] = ()) -> int:
        """Delete what is at or below ``uri`` except the top-level names in ``keep``."""
        ...


def join(base: str, *parts: str) -> str:
    out = base.rstrip("/")
    for part in parts:
        out += "/" + part.strip("/")
    return out


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
        # a full disk: DiskFull, what and where; atomic: a reader never sees half a record
        write_text(self._path(uri), text)

    def create_text(self, uri: str, text: str) -> bool:
        """Written whole beside, then hard-linked into place: link(2) fails with EEXIST when
        the name is taken, so a reader never sees half a record and a concurrent writer of
        the same name (a thread or another process) loses instead of overwriting."""
        path = self._path(uri)
        spare = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.new")
        write_text(spare, text)
        try:
            os.link(spare, path)
        except FileExistsError:
            return False
        finally:
            spare.unlink(missing_ok=True)
        return True

    def children(self, uri: str) -> list[str]:
        path = self._path(uri)
        return sorted(p.name for p in path.iterdir()) if path.is_dir() else []

    def files_under(self, uri: str) -> list[str]:
        path = self._path(uri)
        return sorted(file_uri(p) for p in path.rglob("*") if p.is_file()) if path.is_dir() else []

    def read_bytes(self, uri: str) -> bytes | None:
        path = self._path(uri)
        return path.read_bytes() if path.is_file() else None

    def prune_empty(self, uri: str) -> int:
        root = self._path(uri)
        if not root.is_dir():
            return 0
        removed = 0
        # a link is never followed: it is an entry of its directory, not a directory of the
        # tree (a venv's lib64 → lib, left dangling once an interrupted attempt's empty lib
        # went, made the tidy fail; a link to a directory elsewhere must not be pruned into)
        below = sorted((p for p in root.rglob("*") if p.is_dir() and not p.is_symlink()),
                       key=lambda p: len(p.parts), reverse=True)
        for directory in [*below, root]:
            if not any(directory.iterdir()):
                directory.rmdir()
                removed += 1
        return removed

    def read_tail(self, uri: str, size: int) -> bytes | None:
        path = self._path(uri)
        if not path.is_file():
            return None
        with open(path, "rb") as handle:
            handle.seek(max(path.stat().st_size - size, 0))
            return handle.read()

    def stat_tree(self, uri: str) -> dict[str, FileStat]:
        root = self._path(uri)
        if root.is_file():
            return {"": _stat(root)}
        if not root.is_dir():
            return {}
        return {str(p.relative_to(root)): _stat(p) for p in root.rglob("*") if p.is_file()}

    def digest(self, uri: str) -> str:
        sha = hashlib.sha256()
        with open(self._path(uri), "rb") as handle:
            while chunk := handle.read(1 << 20):
                sha.update(chunk)
        return "sha256:" + sha.hexdigest()

    def remove_tree(self, uri: str, keep: tuple[str, ...] = ()) -> int:
        root = self._path(uri)
        if root.is_file():
            root.unlink()
            return 1
        removed = 0
        for child in sorted(root.iterdir()) if root.is_dir() else []:
            if child.name in keep:
                continue
            if child.is_dir() and not child.is_symlink():
                removed += sum(1 for p in child.rglob("*") if p.is_file())
                shutil.rmtree(child)
            else:
                child.unlink()
                removed += 1
        return removed


def _stat(path: Path) -> FileStat:
    info = path.stat()
    return FileStat(size=info.st_size, stamp=f"mtime:{info.st_mtime_ns}")
