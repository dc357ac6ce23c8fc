"""The records of a W&B offline run file (``run-<id>.wandb``), read back for the tests.

Layout as wandb 0.31 writes it (checked against its own offline files): a 7-byte header
(``:W&B``, the magic 0xBEE1 little-endian, version 0), then LevelDB-log framing in 32 KiB
blocks: each chunk a 4-byte checksum, a 2-byte length, a 1-byte type (1 full, 2 first,
3 middle, 4 last) and the data; a record's chunks joined are one ``wandb.proto
.wandb_internal_pb2.Record``.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

BLOCK = 32768
HEADER = b":W&B\xe1\xbe\x00"


def records(path: Path) -> list[Any]:
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:7] == HEADER, data[:7]
    out, pos, pending = [], 7, b""
    while pos + 7 <= len(data):
        left = BLOCK - pos % BLOCK
        if left < 7:  # a block's tail too short for a header is padding
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        pos += 7
        if kind == 0 and length == 0:
            break
        pending += data[pos:pos + length]
        pos += length
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(pending)
            out.append(record)
            pending = b""
    return out


def history(path: Path) -> list[dict[str, str]]:
    return [{item.key or "/".join(item.nested_key): item.value_json
             for item in r.history.item} for r in records(path)
            if r.WhichOneof("record_type") == "history"]


def run_record(path: Path) -> Any:
    return next(r.run for r in records(path) if r.WhichOneof("record_type") == "run")
