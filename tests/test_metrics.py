"""The TensorBoard decoder against event bytes laid out as TensorBoard writes them."""

from __future__ import annotations

import struct

from flows.runpage.metrics import scalars_from_events, tfrecords


def _varint(n: int) -> bytes:
    out = b""
    while True:
        byte = n & 0x7F
        n >>= 7
        out += bytes([byte | (0x80 if n else 0)])
        if not n:
            return out


def _field(number: int, wire: int, payload: bytes) -> bytes:
    key = _varint(number << 3 | wire)
    return key + (_varint(len(payload)) + payload if wire == 2 else payload)


def _record(data: bytes) -> bytes:
    return struct.pack("<Q", len(data)) + b"\0" * 4 + data + b"\0" * 4


def _event(step: int, value_msg: bytes) -> bytes:
    summary = _field(1, 2, value_msg)
    return _field(1, 1, struct.pack("<d", 1.0)) + _field(2, 0, _varint(step)) + _field(5, 2, summary)


def test_simple_value_and_scalar_tensors():
    simple = _field(1, 2, b"loss") + _field(2, 5, struct.pack("<f", 0.5))
    tensor_f32 = _field(1, 0, _varint(1)) + _field(4, 2, struct.pack("<f", -1.25))
    as_tensor = _field(1, 2, b"rewards/mean") + _field(8, 2, tensor_f32)
    tensor_f64 = _field(1, 0, _varint(2)) + _field(6, 2, struct.pack("<d", 3.5))
    packed = _field(1, 2, b"kl") + _field(8, 2, tensor_f64)
    data = b"".join(_record(e) for e in (_field(3, 2, b"brain.Event:2"), _event(1, simple),
                                          _event(2, as_tensor), _event(2, packed)))
    assert scalars_from_events(data) == [("loss", 1, 0.5), ("rewards/mean", 2, -1.25),
                                         ("kl", 2, 3.5)]


def test_a_torn_last_record_is_ignored():
    data = _record(b"abc") + struct.pack("<Q", 100) + b"xx"
    assert list(tfrecords(data)) == [b"abc"]


def test_chart_draws_reward_and_loss_and_skips_missing_values():
    import base64

    from flows.runpage.charts import metrics_chart_markdown

    metrics = {"steps": [{"step": 0, "rewards/train/mean": 0.8, "rewards/train/max": 0.85},
                         {"step": 1, "rewards/train/mean": 0.7, "actor/train/loss": None},
                         {"step": 2, "actor/train/loss": 1e-5}]}
    markdown = metrics_chart_markdown(metrics)
    assert markdown and markdown.startswith("![reward and loss per step](data:image/svg+xml;base64,")
    svg = base64.b64decode(markdown.split(",", 1)[1].rstrip(")")).decode()
    assert svg.count("<polyline") == 3 and "reward (mean): 0.7" in svg
    assert metrics_chart_markdown({"steps": []}) is None
