"""Lineage records: the small JSON file beside every output that makes skipping safe.

A record says what produced the output (stage, config key, the fingerprints of the upstream
outputs it consumed, versions). ``done()`` trusts an output only when its record matches the
*current* inputs: keys are computed from content and config, never from mutable tags, so a
changed learning rate or an upstream stage that re-ran with other output is never answered
from a stale cache. A record's identity is what its verification found (``verified_identity``),
so a damaged record can be rewritten from a fresh verification without rerunning what
depends on it.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from flows.core.manifest import RECORD_NAME, Manifest
from flows.core.storage import Storage, join

FORMAT_VERSION = 1
RELATIVE = "./"  # an output below the output root, stored relative to it (a moved root works)
STORAGE_SCHEMES = ("file://", "gs://")  # outputs that are files under an output root
__all__ = ["RECORD_NAME", "LineageRecord", "UnreadableRecord", "linked_out", "outside_root", "read_record",
           "relative_outputs", "verified_identity", "write_record"]


def config_key(*parts: Any) -> str:
    """A stable short hash of JSON-able parts (sorted keys), used in output paths."""
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


class LineageRecord(BaseModel):
    format: int = FORMAT_VERSION
    stage: str
    key: str
    inputs: dict[str, str] = Field(default_factory=dict)
    outputs: dict[str, str] = Field(default_factory=dict)
    details: dict[str, Any] = Field(default_factory=dict)
    # per output name: the files verified (flows/core/manifest.py); empty in older records
    manifest: dict[str, Manifest] = Field(default_factory=dict)
    run_id: str = Field(default_factory=lambda: uuid.uuid4().hex)
    created_at: str = Field(default_factory=lambda: datetime.now(UTC).isoformat())

    @property
    def fingerprint(self) -> str:
        """What downstream stages record as their input: changes whenever what this stage
        verified changed (``run_id`` is ``verified_identity``; a random id in older records)."""
        return config_key(self.stage, self.key, self.inputs, self.outputs, self.run_id)

    def matches(self, key: str, inputs: dict[str, str]) -> bool:
        return self.mismatch(key, inputs) is None

    def mismatch(self, key: str, inputs: dict[str, str]) -> str | None:
        """Why this record is not for these inputs (None: it is), for the log."""
        if self.format != FORMAT_VERSION:
            return f"a record of format {self.format}, this version writes {FORMAT_VERSION}"
        if self.key != key:
            return f"key {self.key}, now {key}"
        changed = sorted(n for n in {*inputs, *self.inputs} if inputs.get(n) != self.inputs.get(n))
        return f"changed since: {', '.join(changed)}" if changed else None


    def resolved_outputs(self, root: str) -> dict[str, str]:
        """The outputs as URIs, relative entries taken against the current output root."""
        return {name: join(root, uri[len(RELATIVE):]) if uri.startswith(RELATIVE) else uri
                for name, uri in self.outputs.items()}


def outside_root(outputs: dict[str, str], root: str) -> str | None:
    """Pure: why a record's outputs leave the output root (None: they do not).

    A record is read from the bucket or the root, which a training pod (or anyone with write
    access) can write; an output it names outside the root (an absolute URI elsewhere, a
    ``..`` segment, another bucket) would be handed to the next stage as if this pipeline had
    verified it. Entries relative to the root (``./``) must stay below it;
    absolute storage URIs must be the root or below it. Outputs that are not files (an image
    reference, ``hf://`` model, ``venv:`` path) are checked by their own stage."""
    base = root.rstrip("/")
    for name, uri in outputs.items():
        if uri.startswith(RELATIVE):
            rel = uri[len(RELATIVE):]
            if rel.startswith("/") or ".." in rel.split("/"):
                return f"output {name} {uri!r} climbs out of the output root"
        elif uri.startswith(STORAGE_SCHEMES):
            if uri.rstrip("/") != base and not uri.startswith(base + "/"):
                return f"output {name} {uri!r} is outside the output root {base}"
            if ".." in uri[len(base):].split("/"):
                return f"output {name} {uri!r} climbs out of the output root"
    return None


def linked_out(storage: Storage, outputs: dict[str, str], root: str) -> str | None:
    """Why a local output, symlinks followed, is not under the output root (None: all are):
    a link placed in the root that points elsewhere passes :func:`outside_root`'s text check.
    Object stores have no links (``local_path`` is None there)."""
    root_path = storage.local_path(root)
    if root_path is None:
        return None
    real_root = os.path.realpath(root_path)
    for name, uri in outputs.items():
        path = storage.local_path(uri) if uri.startswith("file://") else None
        if path is not None and not Path(os.path.realpath(path)).is_relative_to(real_root):
            return f"output {name} {uri} resolves to {os.path.realpath(path)}, outside {real_root}"
    return None


def verified_identity(manifest: dict[str, Manifest], details: dict[str, Any]) -> str:
    """A record's ``run_id``: what its verification established, so that a record rewritten
    from a fresh verification of the same files (its old one damaged) has the fingerprint
    the stages after it recorded, and they stay skipped. With content outputs: their files'
    sizes and digests (not stamps, so a copied root keeps it); a rerun that writes other
    bytes (orbax checkpoints always do: OCDBT data files have random names) gets another.
    Without (venvs, a cluster): the verified details."""
    parts: Any = {name: {path: [entry.size, entry.digest] for path, entry in files.items()}
                  for name, files in manifest.items()} if manifest else {"details": details}
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return "verified:" + hashlib.sha256(blob).hexdigest()[:32]


def relative_outputs(outputs: dict[str, str], root: str) -> dict[str, str]:
    """What a record stores: outputs below ``root`` relative to it, anything else as is."""
    base = root.rstrip("/") + "/"
    return {name: RELATIVE + uri[len(base):] if uri.startswith(base) else uri
            for name, uri in outputs.items()}


class UnreadableRecord(ValueError):
    """A record that exists but cannot be used: the caller says so and verifies the output
    again (flows/core/stage.py ``Stage._reverify``)."""


def read_record(storage: Storage, uri: str) -> LineageRecord | None:
    """None when there is no record; UnreadableRecord when there is one that is damaged."""
    try:
        text = storage.read_text(uri)
    except UnicodeDecodeError as exc:  # a garbage-written block: as damaged as bad JSON
        raise UnreadableRecord(f"{uri} is not a lineage record (not UTF-8 text)") from exc
    if text is None:
        return None
    try:
        return LineageRecord.model_validate_json(text)
    except ValueError as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UnreadableRecord(f"{uri} is not a lineage record ({first})") from exc


def write_record(storage: Storage, uri: str, record: LineageRecord) -> None:
    storage.write_text(uri, record.model_dump_json(indent=2))
