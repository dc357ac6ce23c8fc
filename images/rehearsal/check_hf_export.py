"""Check that a MaxText -> Hugging Face export loads in transformers and that training changed it.

Why this exists: ``to_huggingface`` writing files proves little; pitfalls seen in the
field are exports that transformers cannot load (wrong names/shapes, transformers
version skew) and RL runs whose weights never moved (zero advantages).  This script
answers both with one JSON line.

Why a separate Python 3.11 venv with torch: transformers needs torch to instantiate
the model, and this machine carries a CPU build of torch 2.13.0 for Python 3.11 only
(on 3.12 pip would fetch a multi-GB CUDA build).  The rehearsal venv deliberately has no
torch, so this check runs in ``.venvs/hf-check`` (see ``hf-check-requirements.txt``).

What it does:
1. ``AutoModelForCausalLM.from_pretrained(--export)`` and asserts the class is the
   model family's (``--expect-class``, the backend passes the one of ``model.maxtext_name``:
   ``Qwen3MoeForCausalLM`` by default);
2. greedily generates a few tokens from a short prompt with the export's tokenizer;
3. compares every tensor of the export's safetensors files with the original's
   (same names and shapes required; values compared in float32) and counts those
   that differ at all.  Why exact: the tiny model is written in bfloat16 and the
   untrained HF -> MaxText -> HF round trip reproduces it bit for bit, while one GRPO
   step at the tutorial's learning rate (~1.5e-6 with AdamW) moves weights by only
   ~1e-6, below bf16 resolution for most elements; a relative tolerance would hide
   real training updates.

Prints ONE JSON line to stdout: ``{"architecture", "tensors_total", "tensors_changed",
"max_abs_diff", "generated_tokens"}``.  Exit code 1 with a message on stderr if any
step fails, if names/shapes differ, or (unless ``--allow-unchanged``) if no tensor
changed.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
from pathlib import Path

DEFAULT_CLASS = "Qwen3MoeForCausalLM"


def fail(msg: str) -> None:
    """Exit 1 with a clear message (stderr), keeping stdout for the JSON line only."""
    print(f"check_hf_export: FAILED: {msg}", file=sys.stderr)
    sys.exit(1)


def load_tensors(directory: Path) -> dict[str, object]:
    """All tensors of a directory's *.safetensors files as float32 torch tensors."""
    from safetensors.torch import load_file

    files = sorted(directory.glob("*.safetensors"))
    if not files:
        fail(f"no *.safetensors files in {directory}")
    out: dict[str, object] = {}
    for f in files:
        for name, t in load_file(str(f)).items():
            if name in out:
                fail(f"tensor {name} appears twice in {directory}")
            out[name] = t.float()
    return out


def compare(export: Path, original: Path, tol: float) -> tuple[int, int, float]:
    """Return (tensors_total, tensors_changed, max_abs_diff) between the two checkpoints."""
    new = load_tensors(export)
    old = load_tensors(original)
    if set(new) != set(old):
        missing = sorted(set(old) - set(new))[:5]
        extra = sorted(set(new) - set(old))[:5]
        fail(f"tensor names differ: missing {missing}, unexpected {extra}")
    changed = 0
    max_diff = 0.0
    for name in sorted(old):
        a, b = old[name], new[name]
        if a.shape != b.shape:  # type: ignore[attr-defined]
            fail(f"shape of {name}: original {tuple(a.shape)} vs export {tuple(b.shape)}")  # type: ignore[attr-defined]
        diff = float((a - b).abs().max()) if a.numel() else 0.0  # type: ignore[operator,attr-defined]
        max_diff = max(max_diff, diff)
        scale = float(a.abs().max()) if a.numel() else 0.0  # type: ignore[attr-defined]
        if diff > tol * max(scale, 1e-12):
            changed += 1
    return len(old), changed, max_diff


def generate(export: Path, new_tokens: int, expected: str) -> tuple[str, int]:
    """Load with transformers, assert the class, and greedily generate ``new_tokens``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(export), dtype=torch.float32)
    arch = type(model).__name__
    if arch != expected:
        fail(f"export loads as {arch}, expected {expected}")
    tok = AutoTokenizer.from_pretrained(str(export))
    inputs = tok("What is 2 + 3?", return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False)
    generated = int(out.shape[1] - inputs["input_ids"].shape[1])
    if generated < 1:
        fail("generate() produced no tokens")
    return arch, generated


def import_and_freeze(expected: str) -> None:
    """Import torch and transformers' path for the expected class up front, then
    ``gc.freeze()`` them.

    Why: loading the export makes ~900k short-lived Python objects (transformers deep-copies
    a weight converter for each of the 18,432 expert tensors), so the collector runs full
    collections that also walk every object of the imports; frozen, they are skipped. The
    collector is off while importing, where nothing is garbage to find. What the check
    loads, runs and compares is unchanged."""
    gc.disable()
    import safetensors.torch  # noqa: F401
    import torch  # noqa: F401
    import transformers

    # their lazy imports; an unknown class name is reported by the load itself
    _ = transformers.AutoModelForCausalLM, transformers.AutoTokenizer
    getattr(transformers, expected, None)
    gc.enable()
    gc.freeze()


def main() -> None:
    """CLI entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--export", type=Path, required=True, help="directory written by to_huggingface")
    parser.add_argument("--original", type=Path, required=True, help="the HF checkpoint that was converted")
    parser.add_argument("--expect-class", default=DEFAULT_CLASS,
                        help=f"the transformers class the export must load as (default {DEFAULT_CLASS})")
    parser.add_argument("--new-tokens", type=int, default=4, help="tokens to generate (default 4)")
    parser.add_argument(
        "--tolerance",
        type=float,
        default=0.0,
        help="relative change (to the tensor's max |value|) counted as 'changed'; default 0 = any bit",
    )
    parser.add_argument("--allow-unchanged", action="store_true", help="do not fail when no tensor changed")
    args = parser.parse_args()
    for d in (args.export, args.original):
        if not d.is_dir():
            fail(f"not a directory: {d}")
    try:
        import_and_freeze(args.expect_class)
        arch, generated = generate(args.export, args.new_tokens, args.expect_class)
        total, changed, max_diff = compare(args.export, args.original, args.tolerance)
    except SystemExit:
        raise
    except Exception as exc:
        fail(f"{type(exc).__name__}: {exc}")
        return
    result = {
        "architecture": arch,
        "tensors_total": total,
        "tensors_changed": changed,
        "max_abs_diff": max_diff,
        "generated_tokens": generated,
    }
    print(json.dumps(result))
    if changed == 0 and not args.allow_unchanged:
        fail("no tensor changed between original and export (did training update the weights?)")


if __name__ == "__main__":
    main()
