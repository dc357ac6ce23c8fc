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
import uuid
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, Field

from flows.core.manifest import RECORD_NAME, Manifest
from flows.core.storage import Storage, join

FORMAT_VERSION = 1
RELATIVE = "./"  # an output below the output root, stored relative to it (a moved root works)
__all__ = ["RECORD_NAME", "LineageRecord", "UnreadableRecord", "read_record",
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
