"""The TensorBoard decoder against event bytes laid out as TensorBoard writes them."""

from __future__ import annotations

import struct

from flows.runpage.metrics import decode_events, scan_records
from tests.support.tfevents import pb_field, pb_varint, tf_event, tf_record


def test_simple_value_and_scalar_tensors():
    simple = pb_field(1, 2, b"loss") + pb_field(2, 5, struct.pack("<f", 0.5))
    tensor_f32 = pb_field(1, 0, pb_varint(1)) + pb_field(4, 2, struct.pack("<f", -1.25))
    as_tensor = pb_field(1, 2, b"rewards/mean") + pb_field(8, 2, tensor_f32)
    tensor_f64 = pb_field(1, 0, pb_varint(2)) + pb_field(6, 2, struct.pack("<d", 3.5))
    packed = pb_field(1, 2, b"kl") + pb_field(8, 2, tensor_f64)
    data = b"".join(tf_record(e) for e in (pb_field(3, 2, b"brain.Event:2"), tf_event(1, simple),
                                           tf_event(2, as_tensor), tf_event(2, packed)))
    assert decode_events(data)[0] == [("loss", 1, 0.5), ("rewards/mean", 2, -1.25),
                                         ("kl", 2, 3.5)]


def test_a_torn_last_record_is_ignored():
    data = tf_record(b"abc") + struct.pack("<Q", 100) + b"xx"
    assert scan_records(data).records == [b"abc"]


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


# --- record CRCs, and metrics that never fail a stage --------------------------------------

def _events(*steps: int) -> bytes:
    records = [tf_record(pb_field(3, 2, b"brain.Event:2"))]
    for step in steps:
        value = pb_field(1, 2, b"loss") + pb_field(2, 5, struct.pack("<f", step / 10))
        records.append(tf_record(tf_event(step, value)))
    return b"".join(records)


def test_crc32c_is_castagnolis_with_and_without_the_c_library(monkeypatch) -> None:
    import os
    import sys

    import google_crc32c

    from flows.runpage.metrics import crc32c

    assert crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value (RFC 3720 B.4)
    data = os.urandom(3000)
    expected = int(google_crc32c.value(data))
    monkeypatch.setitem(sys.modules, "google_crc32c", None)  # the table in Python
    assert crc32c(b"123456789") == 0xE3069283 and crc32c(data) == expected


def test_corrupted_truncated_and_malformed_files_are_skipped_counted_and_reported(
        tmp_path) -> None:
    """Real files on disk, as a training leaves them: one intact, one with a flipped byte
    inside a record, one cut off mid-record (a killed writer), one of garbage, and one whose
    record has valid CRCs but a payload that is not an Event. None may raise (IndexError or
    struct.error from TrainStage.verify would fail a finished training)."""
    from flows.core.storage import LocalStorage, file_uri
    from flows.runpage.metrics import summarize_run

    run = tmp_path / "run" / "tensorboard"
    run.mkdir(parents=True)
    good = _events(1, 2)
    (run / "events.out.tfevents.1.good").write_bytes(good)
    flipped = bytearray(_events(3, 4))
    flipped[-10] ^= 0xFF  # inside the last record's payload
    (run / "events.out.tfevents.2.flipped").write_bytes(bytes(flipped))
    torn = _events(5, 6)
    (run / "events.out.tfevents.3.torn").write_bytes(torn[:-7])
    (run / "events.out.tfevents.4.garbage").write_bytes(bytes(range(256)) * 3)
    short_float = pb_field(5, 2, pb_field(1, 2, pb_field(1, 2, b"loss") + b"\x15\x00\x00"))
    malformed = tf_record(b"\x10\xff") + tf_record(short_float)  # a cut varint, a cut float
    (run / "events.out.tfevents.5.malformed").write_bytes(malformed)
    warnings: list[str] = []
    summary = summarize_run(LocalStorage(), file_uri(tmp_path / "run"), warn=warnings.append)
    assert [s["step"] for s in summary["steps"]] == [1, 2, 3, 5]
    assert summary["event_files"] == 5
    assert summary["bad_records"] == 5  # flipped, torn, garbage, and both malformed ones
    assert summary["bad_files"] == 2  # garbage and malformed gave nothing
    problems = "\n".join(summary["problems"])
    assert "data CRC mismatch" in problems and "truncated record" in problems
    assert "length CRC mismatch" in problems and "does not decode" in problems
    assert len(warnings) == 1 and "5 bad record(s)" in warnings[0]


def test_an_unreadable_event_file_is_skipped_not_raised(tmp_path) -> None:
    from flows.core.storage import LocalStorage, file_uri
    from flows.runpage.metrics import summarize_run

    class Flaky(LocalStorage):
        def read_bytes(self, uri: str) -> bytes | None:
            if uri.endswith("bad"):
                raise OSError(5, "Input/output error", uri)
            return super().read_bytes(uri)

    (tmp_path / "events.out.tfevents.1.ok").write_bytes(_events(1))
    (tmp_path / "events.out.tfevents.2.bad").write_bytes(_events(2))
    summary = summarize_run(Flaky(), file_uri(tmp_path))
    assert [s["step"] for s in summary["steps"]] == [1] and summary["bad_files"] == 1
    assert "Input/output error" in summary["problems"][0]


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

    # As Tunix 0.1.7 logs them (flows/runpage/alignment.py reward_offset cites where): the
    # rollout's rewards at the global step before the update, its loss at train step + 1.
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


def test_rows_stay_per_step_when_several_updates_share_one_rollout():
    from flows.runpage.artifacts import metric_rows

    # Two optimizer updates per global step (mini-batches): Tunix writes rewards at global
    # steps 0-1 and the four losses at train steps 1-4, so no row may pair them.
    steps = [{"step": s, **({"rewards/train/mean": 0.1 * s} if s < 2 else {}),
              **({"actor/train/loss": 1.0 / s} if s else {})} for s in range(5)]
    rows = metric_rows({"steps": steps})
    assert [r["step"] for r in rows] == [0, 1, 2, 3, 4]
    assert rows[0]["reward_mean"] == 0.0 and rows[1]["loss"] == 1.0


def test_the_chart_pairs_rewards_and_loss_as_the_table_does(tmp_path) -> None:
    """Event files on disk as Tunix 0.1.7 leaves them (rewards at global steps 0-2, loss at
    train steps 1-3): each reward point of the chart stands above the loss of the update it
    fed, at the table row's step (before, rewards were drawn at 0-2 and loss at 1-3)."""
    import base64
    import re

    from flows.core.storage import LocalStorage, file_uri
    from flows.runpage.artifacts import metric_rows
    from flows.runpage.charts import metrics_chart_markdown
    from flows.runpage.metrics import summarize_run

    def scalar(tag: str, value: float) -> bytes:
        return pb_field(1, 2, tag.encode()) + pb_field(2, 5, struct.pack("<f", value))

    records = [tf_record(pb_field(3, 2, b"brain.Event:2"))]
    for step in range(3):
        for tag, value in (("mean", 0.5 + step / 10), ("max", 0.9 + step / 100),
                           ("min", 0.1 * step)):
            records.append(tf_record(tf_event(step, scalar(f"rewards/train/{tag}", value))))
        records.append(tf_record(tf_event(step + 1, scalar("actor/train/loss", 1.0 / (step + 1)))))
    (tmp_path / "tensorboard").mkdir()
    (tmp_path / "tensorboard" / "events.out.tfevents.1.host").write_bytes(b"".join(records))
    metrics = summarize_run(LocalStorage(), file_uri(tmp_path))

    rows = metric_rows(metrics)
    assert [(r["step"], r["reward_mean"], r["loss"]) for r in rows] == [
        (1, 0.5, 1.0), (2, 0.6, 0.5), (3, 0.7, 0.333333)]
    markdown = metrics_chart_markdown(metrics)
    assert markdown
    svg = base64.b64decode(markdown.split(",", 1)[1].rstrip(")")).decode()
    lines = [[float(p.split(",")[0]) for p in pts.split()]
             for pts in re.findall(r'<polyline[^>]*points="([^"]*)"', svg)]
    assert len(lines) == 4  # mean, max, min, loss
    assert all(xs == lines[-1] for xs in lines) and len(lines[-1]) == len(rows)
    labels = re.findall(r'text-anchor="middle" fill="#555">(\d+)</text>', svg)
    assert sorted(set(labels)) == ["1", "2", "3"]  # the table's steps, no step 0
    assert "rewards are its rollout" in svg
