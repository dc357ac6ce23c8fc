"""Benchmark: where a one-field change's time goes, per program of train,
export and evaluate: process start and imports, XLA compilation, checkpoint I/O, the rest.

Runs the rehearsal flow in-process on an output root that already holds a finished
rehearsal (``--root``; its converted checkpoint and base score are reused, as for any
changed learning rate), with ``train.args.learning_rate`` set to a value not run before
there, and JAX's compile log on (``JAX_LOG_COMPILES=1``, which the local backend passes to
the programs). Then reads each program's log:

- start+imports: from the program's start (its log's last write minus its wall) to its
  first timestamped (absl) line, which MaxText's programs write once their imports are done;
- compile: the sum of JAX's "Finished XLA compilation … in X sec" lines (a persistent cache
  hit is not a compilation), and how many programs came from the persistent cache;
- checkpoint I/O: orbax's "Finished load in X seconds" and "Finished blocking save in X
  seconds" lines;
- rest: the program's wall less those (the model's compute, tracing, Python, our checks).

A program without absl lines (the transformers load check) shows only its wall.
``--save FILE`` writes the figures as JSON; ``--baseline FILE`` (saved before a change, on
the same root) prints each figure's ratio to it in the same run. Prints the load average,
since the machine may be shared: compare ratios, not seconds, across loads.
``--reparse SAVED`` prints the table again from a saved run's walls and the newest logs
under ``--root``, in milliseconds: the tests' quick run (on the rehearsal test's finished
run). Exits 1 when no program's log was found to read.
Usage: .venv/bin/python -m benchmarks.stage_profile --root DIR [--lr 3e-3] [--save F] [--baseline F]
       [--reparse SAVED]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import time
from datetime import datetime
from pathlib import Path

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")

ABSL = re.compile(r"^[IWEF](\d{2})(\d{2}) (\d{2}):(\d{2}):(\d{2}\.\d+) ")
COMPILED = re.compile(r"Finished XLA compilation of .* in ([0-9.e-]+) sec")
# tracing and lowering to MLIR happen in every process, cache or not
TRACED = re.compile(r"Finished (?:tracing|jaxpr to MLIR module conversion)[^\n]* in ([0-9.e-]+) sec")
CACHE_HIT = re.compile(r"[Pp]ersistent compilation cache hit")
CKPT_IO = re.compile(r"Finished (?:blocking )?(?:load|save) in ([0-9.]+) seconds")
STAGES = ("train", "export", "evaluate")


def first_absl_time(text: str, year: int) -> float | None:
    for line in text.splitlines():
        if m := ABSL.match(line):
            month, day, hour, minute, sec = m.groups()
            moment = datetime(year, int(month), int(day), int(hour), int(minute))
            return moment.timestamp() + float(sec)
    return None


def profile_program(log: Path, wall: float) -> dict[str, float]:
    text = log.read_text(errors="replace")
    ended = log.stat().st_mtime
    started = ended - wall
    first = first_absl_time(text, datetime.fromtimestamp(ended).year)
    imports = max(0.0, first - started) if first is not None else 0.0
    compiles = [float(x) for x in COMPILED.findall(text)]
    compile_s = sum(compiles)
    trace_s = sum(float(x) for x in TRACED.findall(text))
    io_s = sum(float(x) for x in CKPT_IO.findall(text))
    return {"wall": wall, "start+imports": imports, "trace+lower": trace_s,
            "compile": compile_s, "compile under 1 s": sum(c for c in compiles if c < 1.0),
            "checkpoint io": io_s,
            "rest": max(0.0, wall - imports - trace_s - compile_s - io_s),
            "compiles": float(len(compiles)),
            "cache hits": float(len(CACHE_HIT.findall(text)))}


COLUMNS = (("wall", 7), ("start+imports", 9), ("trace+lower", 11), ("compile", 8),
           ("compile under 1 s", 8), ("checkpoint io", 8), ("rest", 7), ("compiles", 8),
           ("cache hits", 6))
HEADER = f"{'program':<24} " + " ".join(f"{k[:w]:>{w}}" for k, w in COLUMNS)


def row(name: str, parts: dict[str, float]) -> str:
    return f"{name:<24} " + " ".join(f"{parts.get(k, float('nan')):{w}.1f}" for k, w in COLUMNS)


def reparse(root: Path, saved: Path) -> int:
    """Print the table again from a saved run's walls and the newest logs under ``root``;
    how many programs' logs were found."""
    walls = {k.removesuffix(" wall"): v for k, v in json.loads(saved.read_text()).items()
             if k.endswith(" wall")}
    print(HEADER)
    found = 0
    for name, wall in walls.items():
        logs = sorted(root.glob(f"*/*/*/tpurl-logs/{name}.log"), key=lambda p: p.stat().st_mtime)
        logs += sorted(root.glob(f"*/*/*/*/tpurl-logs/{name}.log"),
                       key=lambda p: p.stat().st_mtime)
        if logs:
            print(row(name, profile_program(max(logs, key=lambda p: p.stat().st_mtime), wall)))
            found += 1
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", required=True, help="output root of a finished rehearsal")
    parser.add_argument("--lr", default=f"{1e-3 * (1 + time.time() % 97 / 100):.6g}",
                        help="the learning rate to run (default: a new one each time)")
    parser.add_argument("--save", help="write the figures to this JSON file")
    parser.add_argument("--baseline", help="JSON written by --save before: print ratios")
    parser.add_argument("--reparse", type=Path, help="only print the table of a saved run "
                        "(its --save JSON) from the newest logs under --root")
    args = parser.parse_args()
    if args.reparse:
        return 0 if reparse(Path(args.root), args.reparse) else 1
    os.environ["JAX_LOG_COMPILES"] = "1"

    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

    from flows.core.storage import LocalStorage
    from flows.pipeline import rl_post_training

    load0 = os.getloadavg()
    with temporary_settings({PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
        started = time.monotonic()
        result = rl_post_training(profile="rehearsal", overrides={
            "local.root": args.root, "train.args.learning_rate": args.lr})
        call = time.monotonic() - started
    load1 = os.getloadavg()
    storage = LocalStorage()
    figures: dict[str, float] = {"flow call": call}
    print(f"learning rate {args.lr}; load average {load0[0]:.1f} before, {load1[0]:.1f} after")
    print(HEADER)
    logs_read = 0
    for stage in result.stages:
        if stage.stage not in STAGES:
            continue
        figures[f"stage {stage.stage}"] = stage.duration_s
        for run in stage.workloads:
            path = storage.local_path(run.log_uri)
            read = bool(path and path.exists())
            logs_read += read
            parts = profile_program(path, run.wall_s) if path and read else {"wall": run.wall_s}
            print(row(run.name, parts))
            figures |= {f"{run.name} {k}": v for k, v in parts.items()}
    programs = sum(v for k, v in figures.items() if k.endswith(" wall"))
    figures["programs"] = programs
    print(f"train+export+evaluate programs: {programs:.1f} s (target ≤ 120 s on a quiet "
          f"machine); flow call {call:.1f} s")
    if args.baseline:
        before = json.loads(Path(args.baseline).read_text())
        print(f"{'figure':<40} {'now':>8} {'before':>8} {'ratio':>6}")
        for name, now in figures.items():
            then = before.get(name)
            ratio = f"{now / then:6.2f}" if then else "     -"
            print(f"{name:<40} {now:8.1f} {then if then is not None else float('nan'):8.1f} "
                  f"{ratio}")
    if args.save:
        Path(args.save).write_text(json.dumps(figures, indent=1))
    return 0 if logs_read else 1


if __name__ == "__main__":
    raise SystemExit(main())
