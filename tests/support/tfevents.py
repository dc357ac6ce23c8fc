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


def reward_function_events(per_function: dict[str, list[float]]) -> bytes:
    """An event file as Tunix 0.1.8 writes a recipe's rewards and the updates they fed:
    per rollout step (0..n-1) the aggregates over the functions' sum (rl/reward_manager.py
    ``_calculate_scalar_reward_log_metrics``) and each function's mean as
    ``rewards/train/<fn name>`` (``_prepare_log_metrics``, tagged by rl/rl_cluster.py
    ``_log_metrics`` and sft/metrics_logger.py ``log``); the update's loss at step + 1
    (flows/runpage/alignment.py ``reward_offset`` says why)."""
    def scalar(tag: str, value: float) -> bytes:
        return pb_field(1, 2, tag.encode()) + pb_field(2, 5, struct.pack("<f", value))

    records = [tf_record(pb_field(3, 2, b"brain.Event:2"))]
    steps = len(next(iter(per_function.values())))
    for step in range(steps):
        means = {name: values[step] for name, values in per_function.items()}
        total = sum(means.values())
        for tag, value in (("sum", total), ("mean", total), ("min", 0.0), ("max", 1.0),
                           *means.items()):
            records.append(tf_record(tf_event(step, scalar(f"rewards/train/{tag}", value))))
        records.append(tf_record(tf_event(step + 1, scalar("actor/train/loss", 1.0 / (step + 1)))))
    return b"".join(records)
