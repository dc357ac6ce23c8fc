"""Training metrics from TensorBoard event files, without TensorFlow or tensorboard installed.

Tunix writes scalars (loss, KL, rewards, ...) as TensorBoard events under the run directory.
The orchestrator only needs the numbers, so it decodes the TFRecord framing and the few
protobuf fields of ``Event``/``Summary``/``TensorProto`` it uses (simple values and scalar
tensors); this keeps the flow image small and the decoder a pure, testable function.
"""

from __future__ import annotations

import math
import struct
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

from flows.core.storage import Storage

_DTYPES = {1: ("<f", 4), 2: ("<d", 8), 3: ("<i", 4), 9: ("<q", 8), 19: ("<e", 2)}


def tfrecords(data: bytes) -> Iterator[bytes]:
    """Record payloads of a TFRecord file (length, crc, payload, crc); a torn tail is skipped."""
    offset = 0
    while offset + 12 <= len(data):
        (length,) = struct.unpack_from("<Q", data, offset)
        start = offset + 12
        if start + length + 4 > len(data):
            return
        yield data[start:start + length]
        offset = start + length + 4


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _fields(buf: bytes) -> Iterator[tuple[int, int, Any]]:
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 1:
            value, pos = buf[pos:pos + 8], pos + 8
        elif wire == 2:
            length, pos = _varint(buf, pos)
            value, pos = buf[pos:pos + length], pos + length
        elif wire == 5:
            value, pos = buf[pos:pos + 4], pos + 4
        else:
            return  # groups are not used by these messages
        yield number, wire, value


def _tensor_scalar(buf: bytes) -> float | None:
    dtype, content, packed = 0, b"", {}
    for number, _wire, value in _fields(buf):
        if number == 1:
            dtype = value
        elif number == 4:
            content = value
        elif number in (5, 6, 7, 10, 13):
            packed[number] = value
    if dtype not in _DTYPES:
        return None
    fmt, size = _DTYPES[dtype]
    if len(content) >= size:
        return float(struct.unpack_from(fmt, content)[0])
    field = {1: 5, 2: 6, 3: 7, 9: 10, 19: 13}[dtype]
    raw = packed.get(field)
    if isinstance(raw, bytes) and dtype in (1, 2) and len(raw) >= size:
        return float(struct.unpack_from(fmt, raw)[0])
    if isinstance(raw, int):
        return float(raw)
    if isinstance(raw, bytes) and raw:
        return float(_varint(raw, 0)[0])
    return None


def scalars_from_events(data: bytes) -> list[tuple[str, int, float]]:
    """(tag, step, value) for every scalar in one event file. Pure."""
    out = []
    for record in tfrecords(data):
        step, summary = 0, None
        for number, _wire, value in _fields(record):
            if number == 2:
                step = value
            elif number == 5:
                summary = value
        if summary is None:
            continue
        for number, _wire, value_msg in _fields(summary):
            if number != 1:
                continue
            tag, scalar = "", None
            for vnum, _w, v in _fields(value_msg):
                if vnum == 1:
                    tag = v.decode("utf-8", "replace")
                elif vnum == 2:
                    scalar = struct.unpack("<f", v)[0]
                elif vnum == 8:
                    scalar = _tensor_scalar(v)
            if tag and scalar is not None:
                out.append((tag, step, scalar))
    return out


def summarize_run(storage: Storage, run_dir: str) -> dict[str, Any]:
    """Per-step metrics of a run (local or GCS): every scalar tag, grouped by step."""
    files = [uri for uri in storage.files_under(run_dir) if "tfevents" in uri.rsplit("/", 1)[-1]]
    by_step: dict[int, dict[str, float]] = defaultdict(dict)
    for uri in files:
        data = storage.read_bytes(uri)
        for tag, step, value in scalars_from_events(data or b""):
            by_step[step][tag] = value
    steps = [{"step": step, **{tag: _finite(v) for tag, v in sorted(values.items())}}
             for step, values in sorted(by_step.items())]
    tags = sorted({tag for values in by_step.values() for tag in values})
    return {"steps": steps, "tags": tags, "event_files": len(files)}


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None
