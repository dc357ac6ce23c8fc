"""Lineage records: the small JSON file beside every output that makes skipping safe.

A record says what produced the output (stage, config key, the fingerprints of the upstream
outputs it consumed, versions). ``done()`` trusts an output only when its record matches the
*current* inputs: keys are computed from content and config, never from mutable tags, so a
changed learning rate or a re-run upstream stage is never answered from a stale cache.
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
           "relative_outputs", "write_record"]


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
        """What downstream stages record as their input: changes whenever this stage re-ran."""
        return config_key(self.stage, self.key, self.inputs, self.outputs, self.run_id)

    def matches(self, key: str, inputs: dict[str, str]) -> bool:
        return self.format == FORMAT_VERSION and self.key == key and self.inputs == inputs


    def resolved_outputs(self, root: str) -> dict[str, str]:
        """The outputs as URIs, relative entries taken against the current output root."""
        return {name: join(root, uri[len(RELATIVE):]) if uri.startswith(RELATIVE) else uri
                for name, uri in self.outputs.items()}


def relative_outputs(outputs: dict[str, str], root: str) -> dict[str, str]:
    """What a record stores: outputs below ``root`` relative to it, anything else as is."""
    base = root.rstrip("/") + "/"
    return {name: RELATIVE + uri[len(base):] if uri.startswith(base) else uri
            for name, uri in outputs.items()}


class UnreadableRecord(ValueError):
    """A record that exists but cannot be used: the caller says so and runs the stage."""


def read_record(storage: Storage, uri: str) -> LineageRecord | None:
    """None when there is no record; UnreadableRecord when there is one that is damaged."""
    text = storage.read_text(uri)
    if text is None:
        return None
    try:
        return LineageRecord.model_validate_json(text)
    except ValueError as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UnreadableRecord(f"{uri} is not a lineage record ({first})") from exc


def write_record(storage: Storage, uri: str, record: LineageRecord) -> None:
    storage.write_text(uri, record.model_dump_json(indent=2))
