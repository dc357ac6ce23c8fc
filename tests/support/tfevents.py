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
    """One TFRecord frame as tensorflow core/lib/io/record_writer.cc writes it: length,
    masked CRC32C of the length, data, masked CRC32C of the data."""
    length = struct.pack("<Q", len(data))
    return (length + struct.pack("<I", _masked(length)) + data
            + struct.pack("<I", _masked(data)))


def _masked(data: bytes) -> int:
    """tensorflow core/lib/hash/crc32c.h Mask(), over google-crc32c's CRC (independent of
    the decoder's own code, which the tests check against this)."""
    import google_crc32c

    crc = int(google_crc32c.value(data))
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def tf_event(step: int, value_msg: bytes) -> bytes:
    summary = pb_field(1, 2, value_msg)
    return (pb_field(1, 1, struct.pack("<d", 1.0)) + pb_field(2, 0, pb_varint(step))
            + pb_field(5, 2, summary))
