"""A small parquet file of question/answer rows (or other columns), as a team's set is."""

from __future__ import annotations

from pathlib import Path


def parquet_rows(path: Path, rows: int = 4,
                 columns: tuple[str, str] = ("question", "answer")) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.table({columns[0]: [f"q{i}" for i in range(rows)],
                      columns[1]: [str(i) for i in range(rows)]},
                     schema=pa.schema([(columns[0], pa.string()), (columns[1], pa.string())]))
    pq.write_table(table, path)
    return path
