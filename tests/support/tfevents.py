"""TensorBoard event bytes laid out as TensorBoard writes them (protobuf fields in TFRecord
frames), for the metrics decoder's tests and the fake programs that write training events."""

from __future__ import annotations

import struct


def pb_varint(n: int) -> bytes:
    out = b""
    while True:
        byte = n & 0x7F
        n >>= 7
        out += bytes([byte | (0x80 if n else 0)])
        if not n:
            return out


def pb_field(number: int, wire: int, payload: bytes) -> bytes:
    key = pb_varint(number << 3 | wire)
    return key + (pb_varint(len(payload)) + payload if wire == 2 else payload)


def tf_record(data: bytes) -> bytes:
    return struct.pack("<Q", len(data)) + b"\0" * 4 + data + b"\0" * 4


def tf_event(step: int, value_msg: bytes) -> bytes:
    summary = pb_field(1, 2, value_msg)
    return (pb_field(1, 1, struct.pack("<d", 1.0)) + pb_field(2, 0, pb_varint(step))
            + pb_field(5, 2, summary))
