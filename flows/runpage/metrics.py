"""Training metrics from TensorBoard event files, without TensorFlow or tensorboard installed.

Tunix writes scalars (loss, KL, rewards, ...) as TensorBoard events under the run directory.
The orchestrator only needs the numbers, so it decodes the TFRecord framing and the few
protobuf fields of ``Event``/``Summary``/``TensorProto`` it uses (simple values and scalar
tensors); this keeps the flow image small and the decoder a pure, testable function.

Metrics inform; they never fail a stage. A TFRecord frame is ``uint64 length``, the masked
CRC32C of those 8 bytes, the payload and the payload's masked CRC32C (tensorflow
core/lib/io/record_writer.cc; the mask is tensorflow core/lib/hash/crc32c.h's: rotate right
15 bits, add 0xa282ead8). A record whose CRC does not match, or whose payload does not
decode, is skipped and counted; a bad length ends that file (nothing after it can be
framed); a file that cannot be read at all is skipped and counted. The counts and the
reasons go into the summary (``bad_records``, ``bad_files``, ``problems``), and the caller
logs them.
"""

from __future__ import annotations

import math
import struct
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from flows.core.storage import Storage

_DTYPES = {1: ("<f", 4), 2: ("<d", 8), 3: ("<i", 4), 9: ("<q", 8), 19: ("<e", 2)}


_MASK_DELTA = 0xA282EAD8


def _crc32c_table() -> list[int]:
    table = []
    for n in range(256):
        crc = n
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli): google-crc32c's C code when installed (the GCS extra brings
    it), else a table in Python (a few MB/s, enough for event files)."""
    try:
        import google_crc32c

        return int(google_crc32c.value(data))
    except ImportError:
        crc = 0xFFFFFFFF
        for byte in data:
            crc = _TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
        return crc ^ 0xFFFFFFFF


def masked_crc32c(data: bytes) -> int:
    crc = crc32c(data)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + _MASK_DELTA) & 0xFFFFFFFF


@dataclass
class RecordScan:
    """The payloads whose CRCs match, and what was skipped (one reason per bad record)."""

    records: list[bytes] = field(default_factory=list)
    bad: list[str] = field(default_factory=list)


def scan_records(data: bytes) -> RecordScan:
    """Pure: every TFRecord frame of one file, checked (see the module docstring)."""
    scan, offset = RecordScan(), 0
    while offset < len(data):
        if offset + 12 > len(data):
            scan.bad.append(f"truncated frame at byte {offset}")
            break
        header = data[offset:offset + 8]
        (length,) = struct.unpack_from("<Q", data, offset)
        (length_crc,) = struct.unpack_from("<I", data, offset + 8)
        if masked_crc32c(header) != length_crc:
            scan.bad.append(f"length CRC mismatch at byte {offset}; the rest is unframed")
            break
        start = offset + 12
        if start + length + 4 > len(data):
            scan.bad.append(f"truncated record at byte {offset} ({length} bytes announced)")
            break
        payload = data[start:start + length]
        (payload_crc,) = struct.unpack_from("<I", data, start + length)
        if masked_crc32c(payload) == payload_crc:
            scan.records.append(payload)
        else:
            scan.bad.append(f"data CRC mismatch in the record at byte {offset}")
        offset = start + length + 4
    return scan


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
        value: int | bytes  # what the wire type says: a varint, or the field's bytes
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
        if pos > len(buf):
            raise ValueError(f"field {number} runs past the end of its message")
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


def _timed_record_scalars(record: bytes) -> tuple[list[tuple[str, int, float]], float | None]:
    """The record's scalars and its ``Event.wall_time`` (field 1, a double: seconds since the
    epoch when the writer logged it; tensorflow core/util/event.proto)."""
    out: list[tuple[str, int, float]] = []
    step, summary, wall = 0, None, None
    for number, _wire, value in _fields(record):
        if number == 1 and isinstance(value, bytes) and len(value) == 8:
            wall = struct.unpack("<d", value)[0]
        elif number == 2:
            step = value
        elif number == 5:
            summary = value
    if summary is None:
        return out, wall
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
    return out, wall


STEP_CLOCK = "completions/train/mean_length"  # one record per GRPO step: the steps' clock

_MALFORMED = (struct.error, IndexError, ValueError, TypeError, AttributeError, KeyError)


def decode_events(data: bytes) -> tuple[list[tuple[str, int, float]], list[str]]:
    """Pure: (tag, step, value) for every scalar of one event file, and why each skipped
    record was skipped (a CRC mismatch, a truncation, a payload that does not decode)."""
    scalars, bad, _walls = decode_timed_events(data)
    return scalars, bad


def decode_timed_events(data: bytes) -> tuple[list[tuple[str, int, float]], list[str],
                                              dict[int, float]]:
    """Pure: ``decode_events`` and, per step, the wall time of the step's completion-length
    record (``STEP_CLOCK``). Tunix 0.1.8 logs it once per global step (rl/grpo/grpo_learner.py
    ``completions/mean_length``) and flushes a step's metrics as the next step begins
    (rl/rl_cluster.py ``buffer_metrics``), so the gap between two steps' records is one
    step's duration, checkpoint saves included. Other tags do not keep that clock: JAX's own
    ``jax/`` monitoring is written at step 0 whenever it compiles or checkpoints, and the
    last step's actor metrics are flushed when the trainer closes."""
    scan = scan_records(data)
    out, bad = [], list(scan.bad)
    walls: dict[int, float] = {}
    for index, record in enumerate(scan.records):
        try:
            scalars, wall = _timed_record_scalars(record)
        except _MALFORMED as exc:  # CRC-valid yet malformed: skipped, never raised
            bad.append(f"record {index} does not decode ({type(exc).__name__})")
            continue
        out.extend(scalars)
        for tag, step, _value in scalars:
            if wall is not None and math.isfinite(wall) and tag == STEP_CLOCK:
                walls[step] = max(walls.get(step, wall), wall)
    return out, bad, walls


def step_durations(walls: dict[int, float]) -> dict[int, float]:
    """Pure: each step's seconds, from one event file's clock (``decode_timed_events``):
    only between consecutive steps of the same file, so a resumed run's restart (a new
    file, start-up between) is never counted as a step."""
    return {step: walls[step] - walls[step - 1] for step in sorted(walls)
            if step - 1 in walls and walls[step] >= walls[step - 1]}


def summarize_run(storage: Storage, run_dir: str,
                  warn: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Per-step metrics of a run (local or GCS): every scalar tag, grouped by step. Never
    raises for the event files' sake: unreadable files and bad records are counted,
    reported in ``problems`` and passed to ``warn``."""
    problems: list[str] = []
    bad_records = bad_files = 0
    by_step: dict[int, dict[str, float]] = defaultdict(dict)
    durations: dict[int, float] = {}
    files: list[str] = []
    try:
        files = [uri for uri in storage.files_under(run_dir)
                 if "tfevents" in uri.rsplit("/", 1)[-1]]
    except Exception as exc:  # a listing that fails leaves no metrics, not a failed stage
        problems.append(f"{run_dir}: cannot list event files ({type(exc).__name__}: "
                        f"{str(exc)[:200]})")
    for uri in files:
        try:
            scalars, bad, file_walls = decode_timed_events(storage.read_bytes(uri) or b"")
        except Exception as exc:  # unreadable, or a decoder bug: skip the file, say so
            bad_files += 1
            problems.append(f"{uri}: skipped ({type(exc).__name__}: {str(exc)[:200]})")
            continue
        if bad:
            bad_records += len(bad)
            if not scalars:
                bad_files += 1
            problems.extend(f"{uri}: {why}" for why in bad[:20])
        for tag, step, value in scalars:
            by_step[step][tag] = value
        durations.update(step_durations(file_walls))
    if problems and warn is not None:
        warn(f"metrics: {bad_records} bad record(s) and {bad_files} unusable file(s) of "
             f"{len(files)} event file(s) skipped: " + "; ".join(problems[:5]))
    steps = [{"step": step, **{tag: _finite(v) for tag, v in sorted(values.items())}}
             for step, values in sorted(by_step.items())]
    tags = sorted({tag for values in by_step.values() for tag in values})
    # [step, seconds] pairs (JSON keeps no integer keys): flows/core/throughput.py's steps
    return {"steps": steps, "tags": tags,
            "step_seconds": [[s, round(durations[s], 3)] for s in sorted(durations)],
            "event_files": len(files),
            "bad_records": bad_records, "bad_files": bad_files, "problems": problems[:50]}


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


# What Tunix 0.1.8 logs of the rewards, per step: the aggregates over every function's sum
# (rl/reward_manager.py ``_calculate_scalar_reward_log_metrics``: rewards/sum, mean, min,
# max) and each function's mean as ``rewards/<fn.__name__>``, which rl/rl_cluster.py
# ``_log_metrics`` splits at its first "/" into a prefix and a name, and the metrics logger
# writes as ``<prefix>/<mode>/<name>`` (sft/metrics_logger.py ``log``).
REWARD_AGGREGATES = frozenset({"sum", "mean", "min", "max"})


def reward_function_tag(name: str, mode: str = "train") -> str:
    """The TensorBoard tag of one reward function's mean per step (Tunix's, above)."""
    return f"rewards/{mode}/{name}"


def logged_tags(metrics: dict[str, Any]) -> set[str]:
    """Every tag of a ``summarize_run`` summary (its ``tags``, else its steps' keys)."""
    steps = metrics.get("steps", [])
    return set(metrics.get("tags") or {tag for step in steps for tag in step}) - {"step"}


def reward_functions_logged(tags: Iterable[str], functions: Sequence[str] = (),
                            mode: str = "train") -> list[str]:
    """The reward functions whose mean per step the events hold: the recipe's
    (``functions``) in its order, then any other the events name (MaxText's built-in
    functions, when the recipe names none). Pure. A function named like an aggregate
    (``mean``) cannot be told from it and is left out: its tag is the aggregate's."""
    prefix = f"rewards/{mode}/"
    found = {tag[len(prefix):] for tag in tags if tag.startswith(prefix)}
    found = {name for name in found if name and "/" not in name} - REWARD_AGGREGATES
    ordered = [name for name in functions if name in found]
    return ordered + sorted(found - set(ordered))
