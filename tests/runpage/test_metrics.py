"""The TensorBoard decoder against event bytes laid out as TensorBoard writes them."""

from __future__ import annotations

import struct

from flows.runpage.metrics import scalars_from_events, tfrecords
from tests.support.tfevents import pb_field, pb_varint, tf_event, tf_record


def test_simple_value_and_scalar_tensors():
    simple = pb_field(1, 2, b"loss") + pb_field(2, 5, struct.pack("<f", 0.5))
    tensor_f32 = pb_field(1, 0, pb_varint(1)) + pb_field(4, 2, struct.pack("<f", -1.25))
    as_tensor = pb_field(1, 2, b"rewards/mean") + pb_field(8, 2, tensor_f32)
    tensor_f64 = pb_field(1, 0, pb_varint(2)) + pb_field(6, 2, struct.pack("<d", 3.5))
    packed = pb_field(1, 2, b"kl") + pb_field(8, 2, tensor_f64)
    data = b"".join(tf_record(e) for e in (pb_field(3, 2, b"brain.Event:2"), tf_event(1, simple),
                                           tf_event(2, as_tensor), tf_event(2, packed)))
    assert scalars_from_events(data) == [("loss", 1, 0.5), ("rewards/mean", 2, -1.25),
                                         ("kl", 2, 3.5)]


def test_a_torn_last_record_is_ignored():
    data = tf_record(b"abc") + struct.pack("<Q", 100) + b"xx"
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
