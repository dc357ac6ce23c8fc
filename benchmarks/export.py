"""Benchmark: the rehearsal's export stage (to_huggingface + the transformers load check),
another checkout's way (default: previous main) against this one's, on the same inputs.

Each checkout's own code builds its export workloads (``--emit``: the rehearsal profile's
``export_workload`` and the runtime's checks, as JSON), so "before" is what that checkout
really runs, not a copy kept here. Both are then run alternately, round by round, on the
actor checkpoint and tiny model of a finished rehearsal (``--inputs``, the output root), each
into a new directory. Prints, per round and variant, each program's wall and CPU seconds and
the stage's sum, then the medians and their ratio to before's; checks that both exports hold
the same safetensors bytes and that each load check reported.
``--cold`` gives this checkout's runs new, empty caches (Python bytecode and JAX's compiled
programs) in every round, the first export after an install; otherwise they use the caches
beside the venvs, as a rehearsal does: round 1 may fill them, so with more than one round
the medians leave it out.
Exits 1 when an export holds no model.safetensors or its load check did not report, or when
the two exports differ. ``--quick`` (the tests' run, on the rehearsal test's finished run)
runs this checkout's converter once, no "before" and no load check (the rehearsal test checks
its own export's load): one round's figures, the export's weights checked.
Usage: .venv/bin/python benchmarks/export.py [--inputs ROOT] [--before DIR] [--rounds N] [--cold]
       [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DROP_ENV = re.compile(r"^(PREFECT_|TPURL_|VIRTUAL_ENV$|PYTHONPATH$|PYTHONHOME$)")  # as the backend
CACHE_NAMES = ("python-bytecode-cache", "jax-compilation-cache")


def emit(repo: Path) -> None:
    """Print the export workloads ``repo``'s code builds for the rehearsal profile (run with
    ``repo`` first on sys.path), with the placeholders the runner replaces."""
    sys.path.insert(0, str(repo))
    from flows.backends.local.runtime import HF_CHECK_IMAGE, REHEARSAL_IMAGE, LocalRuntime
    from flows.config import load_profile
    from flows.core.layout import Layout
    from flows.core.programs import export_workload
    from flows.core.storage import program_path

    # a root the profile accepts (under the temporary directory) that holds nothing: only
    # the paths are wanted, each replaced by the runner
    placeholder = Path(tempfile.gettempdir()) / "tpurl-export-bench-placeholder-root"
    profile = load_profile("rehearsal", {"local.root": str(placeholder)}, environ={})
    layout, step = Layout(profile), 2
    runtime = LocalRuntime(profile, layout)
    pythons = {REHEARSAL_IMAGE: layout.venv_dir(), HF_CHECK_IMAGE: layout.hf_check_venv_dir()}
    workloads = [export_workload(profile, layout, runtime, step), *runtime.setup("export").checks]
    out = {"code": str(Path(sys.modules["flows"].__file__ or "").parent),
           "placeholders": {"checkpoint": program_path(layout.actor_params(step)),
                            "export": program_path(layout.export_dir),
                            "model": program_path(layout.tiny_model_dir)},
           "venvs": str(layout.venv_dir().parent),
           "workloads": [{"name": w.name, "python": str(pythons[w.image] / "bin" / "python"),
                          "argv": list(w.argv), "env": dict(w.env)} for w in workloads]}
    print(json.dumps(out))


def workloads_of(repo: Path) -> dict[str, Any]:
    out = subprocess.run([sys.executable, __file__, "--emit", str(repo)], cwd=repo, check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def inputs_in(root: Path) -> dict[str, str]:
    """The newest actor checkpoint and the tiny model of a finished rehearsal under ``root``."""
    checkpoints = sorted(root.glob("*/trained/*/checkpoints/actor/*/model_params"),
                         key=lambda p: p.stat().st_mtime)
    models = sorted(root.glob("sources/*/tiny-qwen3-moe"), key=lambda p: p.stat().st_mtime)
    if not checkpoints or not models:
        sys.exit(f"no finished rehearsal under {root} (run `tpurl run rehearsal` first)")
    return {"checkpoint": str(checkpoints[-1]), "model": str(models[-1])}


def run_variant(spec: dict[str, Any], repo: Path, inputs: dict[str, str], out_dir: Path,
                caches: Path | None) -> dict[str, Any]:
    """Run one variant's workloads in order; wall and CPU seconds of each, and the check's report."""
    swaps = {spec["placeholders"]["checkpoint"]: inputs["checkpoint"],
             spec["placeholders"]["export"]: str(out_dir),
             spec["placeholders"]["model"]: inputs["model"]}
    if caches is not None:
        swaps |= {str(Path(spec["venvs"]) / name): str(caches / name) for name in CACHE_NAMES}

    def swap(text: str) -> str:
        for old, new in swaps.items():
            text = text.replace(old, new)
        return text

    base_env = {k: v for k, v in os.environ.items() if not DROP_ENV.match(k)}
    figures: dict[str, Any] = {}
    for w in spec["workloads"]:
        argv = [w["python"], *[swap(a) for a in w["argv"][1:]]]
        env = {**base_env, "PYTHONUNBUFFERED": "1", **{k: swap(v) for k, v in w["env"].items()}}
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.monotonic()
        proc = subprocess.run(argv, cwd=repo, env=env, capture_output=True, text=True, check=False)
        wall = time.monotonic() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if proc.returncode != 0:
            sys.exit(f"{w['name']} failed ({proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        figures[w["name"]] = {"wall": wall, "cpu": cpu}
        reports = [line for line in proc.stdout.splitlines() if line.startswith("{")]
        if reports:
            figures["report"] = json.loads(reports[-1])
    figures["stage"] = {"wall": sum(v["wall"] for k, v in figures.items() if k != "report"),
                        "cpu": sum(v["cpu"] for k, v in figures.items() if k != "report")}
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--emit", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--inputs", type=Path, default=ROOT / ".tpurl/rehearsal",
                        help="output root of a finished rehearsal (default: this checkout's)")
    parser.add_argument("--before", type=Path, default=Path("/work/main"),
                        help="the checkout measured as 'before' (default /work/main)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--cold", action="store_true", help="new, empty caches for every 'after' run")
    parser.add_argument("--quick", action="store_true",
                        help="this checkout's export once, no 'before' (the tests' run)")
    args = parser.parse_args()
    if args.emit:
        emit(args.emit)
        return 0
    inputs = inputs_in(args.inputs.resolve())
    specs = {"after": (workloads_of(ROOT), ROOT)}
    if args.quick:  # the converter alone: the load check is not run, so not required
        args.rounds = 1
        spec = specs["after"][0]
        spec["workloads"] = spec["workloads"][:1]
    else:
        specs = {"before": (workloads_of(args.before), args.before), **specs}
    print(f"inputs: {inputs}")
    for name, (spec, _) in specs.items():
        print(f"{name}: code {spec['code']}; " + "; ".join(
            " ".join(w["argv"][:3]) + " ..." for w in spec["workloads"]))
    scratch = Path(tempfile.mkdtemp(prefix="tpurl-export-bench-"))
    results: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
    wrong: list[str] = []
    try:
        for rnd in range(1, args.rounds + 1):
            exports = {}
            for name, (spec, repo) in specs.items():
                out = scratch / f"{name}-{rnd}"
                caches = scratch / f"caches-{rnd}" if args.cold and name == "after" else None
                figures = run_variant(spec, repo, inputs, out, caches)
                results[name].append(figures)
                exports[name] = out
                load = os.getloadavg()[0]
                print(f"round {rnd} {name:<6} " + "  ".join(
                    f"{k} {v['wall']:.1f} s wall / {v['cpu']:.1f} s cpu"
                    for k, v in figures.items() if k != "report") + f"  (load {load:.1f})")
                print(f"   load check: {figures.get('report')}")
                if not (out / "model.safetensors").is_file() or (
                        "report" not in figures and not args.quick):
                    wrong.append(f"round {rnd} {name}: no model.safetensors or no load check")
            if "before" in exports and all((o / "model.safetensors").is_file()
                                           for o in exports.values()):
                same = (exports["before"] / "model.safetensors").read_bytes() == \
                    (exports["after"] / "model.safetensors").read_bytes()
                verdict = "the same bytes" if same else "DIFFERENT"
                print(f"round {rnd}: the two exports' model.safetensors are {verdict}")
                if not same:
                    wrong.append(f"round {rnd}: the exports differ")
            for out in exports.values():
                shutil.rmtree(out, ignore_errors=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if args.rounds > 1 and not args.cold:  # round 1 may have filled the caches: shown, not counted
        results = {name: runs[1:] for name, runs in results.items()}
    label = f"median over {len(results['after'])} round(s)"
    print(f"{label:<36} {'before':>9} {'after':>9} {'ratio':>6}")
    for key in results["after"][0]:
        if key == "report":
            continue
        for measure in ("wall", "cpu"):
            then = statistics.median(r[key][measure] for r in results["before"] if key in r) \
                if results["before"] and all(key in r for r in results["before"]) else None
            now = statistics.median(r[key][measure] for r in results["after"])
            ratio = f"{now / then:6.2f}" if then else "     -"
            shown = f"{then:9.1f}" if then is not None else "        -"
            print(f"{key + ' ' + measure + ' s':<36} {shown} {now:9.1f} {ratio}")
    for line in wrong:
        print(line)
    return 1 if wrong else 0


if __name__ == "__main__":
    raise SystemExit(main())
