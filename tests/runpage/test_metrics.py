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
    assert svg.count("<polyline") == 3  # mean and max on the reward panel, the loss
    assert "reward per step" in svg and "actor loss per step" in svg
    assert ">0.85<" in svg and ">0.7<" in svg  # the reward panel's y-axis ticks, in units
    assert metrics_chart_markdown({"steps": []}) is None


def test_identical_series_are_one_line_named_together():
    import base64

    from flows.runpage.charts import metrics_chart_markdown

    same = [{"step": s, "rewards/train/mean": 0.5, "rewards/train/max": 0.5,
             "rewards/train/min": 0.5, "actor/train/loss": 0.1 * s} for s in (0, 1)]
    svg = base64.b64decode(metrics_chart_markdown({"steps": same}).split(",", 1)[1].rstrip(")")
                           ).decode()
    assert svg.count("<polyline") == 2 and "mean = max = min" in svg


def test_each_row_holds_one_updates_rewards_and_loss():
    from flows.runpage.artifacts import metric_rows

    # As the rehearsal logs them: rewards at steps 0-1, loss at steps 1-2.
    steps = [{"step": 0, "rewards/train/mean": 0.1},
             {"step": 1, "rewards/train/mean": 0.2, "actor/train/loss": 0.5},
             {"step": 2, "actor/train/loss": 0.4}]
    rows = metric_rows({"steps": steps})
    assert [(r["step"], r["reward_mean"], r["loss"]) for r in rows] == [(1, 0.1, 0.5),
                                                                        (2, 0.2, 0.4)]


def test_rows_stay_per_step_when_rewards_and_loss_share_steps():
    from flows.runpage.artifacts import metric_rows

    steps = [{"step": s, "rewards/train/mean": 0.1 * s, "actor/train/loss": 1.0 - s}
             for s in (1, 2)]
    assert [(r["step"], r["reward_mean"], r["loss"]) for r in metric_rows({"steps": steps})] \
        == [(1, 0.1, 0.0), (2, 0.2, -1.0)]
