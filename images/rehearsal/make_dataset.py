"""Write a deterministic small parquet file shaped like nvidia/OpenMathInstruct-2.

Why this exists: the rehearsal has no Hugging Face hub, but ``train_rl`` must still run
its real data path.  Passing ``hf_train_files=<this file>`` together with
``dataset_name=eval_dataset_name=nvidia/OpenMathInstruct-2`` makes MaxText load the
file with ``datasets.load_dataset("parquet", ...)`` and take its OpenMathInstruct-2
train/test split branch, exactly as on the cluster with the real data.

Columns are those of OpenMathInstruct-2 (``problem``, ``generated_solution``,
``expected_answer``, ``problem_source``), all strings.  Problems are simple integer
arithmetic so the expected answers are exact.  Same ``--rows`` and ``--seed`` give the
same rows; the parquet is written without pandas metadata or statistics timestamps so
its bytes are stable for a given pyarrow version.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

COLUMNS = ("problem", "generated_solution", "expected_answer", "problem_source")
OPS = ("+", "-", "*")


def make_row(rng: random.Random) -> dict[str, str]:
    """One arithmetic problem with a worked solution in the dataset's \\boxed{} style."""
    a, b = rng.randint(2, 99), rng.randint(2, 99)
    op = OPS[rng.randrange(len(OPS))]
    result = a + b if op == "+" else a - b if op == "-" else a * b
    return {
        "problem": f"What is ${a} {op} {b}$?",
        "generated_solution": f"We compute ${a} {op} {b} = {result}$. The answer is $\\boxed{{{result}}}$.",
        "expected_answer": str(result),
        "problem_source": "augmented_math",
    }


def make_table(rows: int, seed: int) -> pa.Table:
    """Build the table column by column so the schema is always four string columns."""
    rng = random.Random(seed)
    data = [make_row(rng) for _ in range(rows)]
    return pa.table({c: pa.array([r[c] for r in data], type=pa.string()) for c in COLUMNS})


def main() -> None:
    """CLI entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="output .parquet file")
    parser.add_argument("--rows", type=int, default=256, help="number of rows (default 256)")
    parser.add_argument("--seed", type=int, default=0, help="RNG seed")
    args = parser.parse_args()
    if args.rows < 1:
        parser.error("--rows must be >= 1")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    table = make_table(args.rows, args.seed)
    pq.write_table(table, args.out, compression="zstd", write_statistics=False, store_schema=False)
    print(json.dumps({"out": str(args.out), "rows": args.rows, "seed": args.seed}))


if __name__ == "__main__":
    main()
