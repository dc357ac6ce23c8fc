"""Output manifests: what a verified output looked like, so a later run can tell it is intact.

A lineage record names the output; its manifest says which files it held, their sizes and
content digests. ``done()`` trusts an output only while the manifest still matches, so a
truncated, deleted or rewritten file makes that stage (and what depends on it) run again.

Checking is cheap where it matters: a local file whose size and modification time are the
recorded ones is not read again (git's index does the same); anything else is re-hashed,
so a copied output root (new mtimes, same bytes) still passes. On GCS the object listing
carries size, crc32c and generation, so nothing is downloaded.
"""

from __future__ import annotations

import hashlib
import json

from pydantic import BaseModel

from flows.core.storage import FileStat, Storage, join

RECORD_NAME = "tpurl-lineage.json"
LOGS_DIR = "tpurl-logs"


class FileEntry(BaseModel):
    size: int
    digest: str
    stamp: str


Manifest = dict[str, FileEntry]


def _content(name: str) -> bool:
    """The record and the logs live beside the output but are not part of it."""
    return name != RECORD_NAME and name != LOGS_DIR and not name.startswith(f"{LOGS_DIR}/")


def _uri(base: str, name: str) -> str:
    return join(base, name) if name else base


def build_manifest(storage: Storage, uri: str) -> Manifest:
    stats = storage.stat_tree(uri)
    return {name: FileEntry(size=s.size, digest=s.digest or storage.digest(_uri(uri, name)),
                            stamp=s.stamp)
            for name, s in sorted(stats.items()) if _content(name)}


def manifest_problems(storage: Storage, uri: str, expected: Manifest) -> list[str]:
    """Each way the output differs from its manifest (empty: intact). Extra files are fine:
    a resumed training run adds checkpoints beside the verified ones."""
    if not expected:
        return [f"{uri}: the manifest is empty"]
    stats: dict[str, FileStat] = storage.stat_tree(uri)
    problems = []
    for name, entry in expected.items():
        shown = name or uri
        found = stats.get(name)
        if found is None:
            problems.append(f"{shown} is missing")
        elif found.size != entry.size:
            problems.append(f"{shown} has {found.size} bytes, {entry.size} were verified")
        elif found.stamp != entry.stamp and \
                (found.digest or storage.digest(_uri(uri, name))) != entry.digest:
            problems.append(f"{shown} was rewritten since it was verified (content differs)")
    return problems


def manifest_digest(manifest: Manifest) -> str:
    """One digest of an output's files (names, sizes, content digests; not stamps, so a
    copied output keeps it): what the promoted pointer carries for its export."""
    parts = {name: [entry.size, entry.digest] for name, entry in sorted(manifest.items())}
    return "sha256:" + hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()
