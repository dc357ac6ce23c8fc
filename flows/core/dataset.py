"""Is the training dataset one MaxText can read? Checked before any workload starts.

Without this, a missing file or a file with the wrong columns was found 40 s into training
as a traceback naming neither the field nor the fix. Only the parquet footer is read
(the last bytes of the file, a range read on GCS), so the check costs one request however
large the dataset is.
"""

from __future__ import annotations

import glob
import struct
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from flows.core.storage import Storage, file_uri

if TYPE_CHECKING:
    import pyarrow.parquet as pq

FIELD = "data.train_files"
# MaxText 0.2.4 maxtext/trainers/post_train/rl/utils_rl.py (process_data): the question is the
# first of these columns present, the answer likewise; with none, `question`/`answer` stay
# unbound and training dies with UnboundLocalError. AIME-style rows carry them nested instead.
QUESTION_COLUMNS = ("problem", "prompt", "question")
ANSWER_COLUMNS = ("answer", "solution", "expected_answer")
NESTED_FORM = ("extra_info", "reward_model")
FOOTER_TAIL = 8  # 4-byte little-endian footer length + b"PAR1"


def dataset_uri(value: str) -> str:
    """``data.train_files`` as a storage URI (a plain path is a local file)."""
    return value if urlparse(value).scheme else file_uri(value)


def column_problem(columns: list[str]) -> str | None:
    names = set(columns)
    if set(NESTED_FORM) <= names:
        return None
    missing = []
    if not names & set(QUESTION_COLUMNS):
        missing.append(f"a question column (one of {', '.join(QUESTION_COLUMNS)})")
    if not names & set(ANSWER_COLUMNS):
        missing.append(f"an answer column (one of {', '.join(ANSWER_COLUMNS)})")
    if not missing:
        return None
    return (f"has columns {', '.join(sorted(names)) or 'none'}; MaxText's RL data pipeline "
            f"needs {' and '.join(missing)}")


def parquet_metadata(storage: Storage, uri: str) -> pq.FileMetaData:
    """The file's parquet footer, read from its tail alone (two ranged reads, whatever the
    file's size); FileNotFoundError when it is gone, ValueError when it is not parquet."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    tail = storage.read_tail(uri, FOOTER_TAIL)
    if tail is None:
        raise FileNotFoundError(f"{uri} does not exist")
    if len(tail) < FOOTER_TAIL or tail[4:] != b"PAR1":
        raise ValueError("it is not a parquet file (no PAR1 footer)")
    (length,) = struct.unpack("<I", tail[:4])
    footer = storage.read_tail(uri, length + FOOTER_TAIL) or b""
    try:
        return pq.read_metadata(pa.BufferReader(b"PAR1" + footer))
    except (pa.ArrowException, OSError) as exc:
        raise ValueError(f"its parquet footer does not parse ({exc})") from exc


def parquet_columns(storage: Storage, uri: str) -> list[str]:
    """Top-level column names from the footer; as :func:`parquet_metadata` refuses."""
    return list(parquet_metadata(storage, uri).schema.to_arrow_schema().names)


def dataset_problem(storage: Storage, value: str) -> tuple[str, str] | None:
    """(problem, fix) for ``data.train_files``, or None when MaxText can train on it."""
    uri = dataset_uri(value)
    if urlparse(uri).scheme == "hf":  # MaxText reads the hub from the pod; no Storage here can
        return None  # (a gs:// storage refused it as "not a parquet file")
    if "*" in value and urlparse(uri).scheme == "file":
        matches = sorted(glob.glob(urlparse(uri).path))
        if not matches:
            return (f"{value} matches no file", "point data.train_files at existing parquet files")
        uri = file_uri(matches[0])
    elif "*" in value:
        return None  # a remote glob: MaxText expands it; the stage checks what it reads
    try:
        columns = parquet_columns(storage, uri)
    except FileNotFoundError:
        return (f"{value} does not exist", "point data.train_files at the parquet file (local "
                "path, file:// or gs:// URI), or announce the dataset once it is uploaded")
    except ValueError as exc:
        return (f"{value}: {exc}", "data.train_files must be a parquet file")
    if problem := column_problem(columns):
        return (f"{value} {problem}", "rename the columns (e.g. problem/expected_answer as in "
                "OpenMathInstruct-2) or convert the file before announcing it")
    return None
