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

from flows.core.storage import Storage

RECORD_NAME = "tpurl-lineage.json"
FORMAT_VERSION = 1


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
    run_id: str = Field(default_factory=lambda: uuid.uuid4().hex)
    created_at: str = Field(default_factory=lambda: datetime.now(UTC).isoformat())

    @property
    def fingerprint(self) -> str:
        """What downstream stages record as their input: changes whenever this stage re-ran."""
        return config_key(self.stage, self.key, self.inputs, self.outputs, self.run_id)

    def matches(self, key: str, inputs: dict[str, str]) -> bool:
        return self.format == FORMAT_VERSION and self.key == key and self.inputs == inputs


def read_record(storage: Storage, uri: str) -> LineageRecord | None:
    text = storage.read_text(uri)
    if text is None:
        return None
    try:
        return LineageRecord.model_validate_json(text)
    except ValueError:
        return None  # a corrupt record is treated as absent: the stage re-runs


def write_record(storage: Storage, uri: str, record: LineageRecord) -> None:
    storage.write_text(uri, record.model_dump_json(indent=2))
