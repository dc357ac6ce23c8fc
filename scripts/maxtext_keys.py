"""Generate flows/config/maxtext_keys.json: the argument names the pinned MaxText accepts.

Usage: python scripts/maxtext_keys.py PATH   (a maxtext-X.whl, or a directory holding the
``maxtext/`` package, e.g. an unpacked wheel or a venv's site-packages)

Why a generated file and not the installed package: the orchestrator venv never installs
MaxText (it pulls JAX), and `tpurl validate` must answer in a second, before any venv is
built. The file is regenerated from the pinned version's own files whenever the pin in
images/rehearsal/requirements.lock moves (tests/config/test_maxtext_keys.py checks the pin).

What decides a key (MaxText 0.2.4, maxtext/configs/pyconfig.py ``_prepare_for_pydantic``):
every top-level key of the merged config must be a field of the program's pydantic config
class, or a field of one of its nested models (``_check_for_invalid_keys``), else the
program stops with "'KEY' not in ...". The class is ``types.RLConfig`` for train_rl
(trainers/post_train/rl/train_rl.py) and ``types.MaxTextConfig`` (pyconfig's default) for
the checkpoint conversions. The fields are read from configs/types.py with ``ast`` (the
module cannot be imported without JAX); base.yml and post_train/rl.yml keys are recorded
too, as a cross-check that the YAML the programs load is covered.
"""

from __future__ import annotations

import ast
import base64
import hashlib
import json
import sys
import zipfile
from pathlib import Path

FILES = ("maxtext/configs/types.py", "maxtext/configs/base.yml",
         "maxtext/configs/post_train/rl.yml", "maxtext/checkpoint_conversion/to_maxtext.py",
         "maxtext/checkpoint_conversion/to_huggingface.py")
# the conversion scripts' own command-line flags (argparse / absl), by the step that runs them
SCRIPT_FLAGS = {"convert": "maxtext/checkpoint_conversion/to_maxtext.py",
                "export": "maxtext/checkpoint_conversion/to_huggingface.py"}
PROGRAMS = {"train_rl": "RLConfig", "checkpoint_conversion": "MaxTextConfig"}
OUT = Path(__file__).resolve().parents[1] / "flows" / "config" / "maxtext_keys.json"


def _read(source: Path) -> tuple[dict[str, bytes], str]:
    if source.is_file():
        with zipfile.ZipFile(source) as wheel:
            names = wheel.namelist()
            version = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
            return {f: wheel.read(f) for f in FILES}, version.removesuffix(".dist-info")
    info = next(source.glob("maxtext-*.dist-info"), None)
    version = info.name.removesuffix(".dist-info") if info else "maxtext-unknown"
    return {f: (source / f).read_bytes() for f in FILES}, version


def _classes(tree: ast.Module) -> dict[str, ast.ClassDef]:
    return {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}


def _own_fields(node: ast.ClassDef) -> dict[str, str | None]:
    """Annotated class attributes (pydantic fields) and the class name each is typed as."""
    fields: dict[str, str | None] = {}
    for item in node.body:
        if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            name = item.target.id
            if name == "model_config" or (isinstance(item.annotation, ast.Subscript) and
                                          ast.unparse(item.annotation.value) == "ClassVar"):
                continue
            ann = item.annotation
            fields[name] = ann.id if isinstance(ann, ast.Name) else None
    return fields


def _fields(name: str, classes: dict[str, ast.ClassDef]) -> dict[str, str | None]:
    node = classes[name]
    merged: dict[str, str | None] = {}
    for base in node.bases:
        if isinstance(base, ast.Name) and base.id in classes:
            merged.update(_fields(base.id, classes))
    merged.update(_own_fields(node))
    return merged


def _nested(fields: dict[str, str | None], classes: dict[str, ast.ClassDef],
            seen: frozenset[str] = frozenset()) -> dict[str, list[str]]:
    """Fields typed as another model of the module: their own fields, by field name."""
    nested: dict[str, list[str]] = {}
    for field, typed in fields.items():
        if typed in classes and typed not in seen and (inner := _fields(typed, classes)):
            nested[field] = sorted(inner)  # (an Enum-typed field has no fields: skipped)
            for sub, keys in _nested(inner, classes, seen | {typed}).items():
                nested.setdefault(sub, keys)
    return nested


def _script_flags(source: bytes) -> list[str]:
    """``--name`` of every argparse ``add_argument("--name", ...)`` and absl
    ``flags.DEFINE_*("name", ...)`` call in a script."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.args and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)):
            continue
        name, first = node.func.attr, node.args[0].value
        if name == "add_argument" and first.startswith("--"):
            found.add(first)
        elif name.startswith("DEFINE_"):
            found.add(f"--{first}")
    return sorted(found)


def _yaml_keys(text: bytes) -> list[str]:
    keys = []
    for line in text.decode().splitlines():
        if line and not line.startswith((" ", "#", "-", "\t")) and ":" in line:
            keys.append(line.split(":", 1)[0].strip())
    return sorted(set(keys))


def _sha256(data: bytes) -> str:  # the wheel RECORD's form: urlsafe base64, no padding
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def build(source: Path) -> dict:
    files, version = _read(source)
    classes = _classes(ast.parse(files["maxtext/configs/types.py"]))
    programs = {}
    for program, cls in PROGRAMS.items():
        fields = _fields(cls, classes)
        programs[program] = {"config_class": cls, "keys": sorted(fields),
                             "nested": _nested(fields, classes)}
    return {
        "provenance": {
            "package": version,
            "generated_by": "scripts/maxtext_keys.py",
            "files": {f: f"sha256={_sha256(data)}" for f, data in files.items()},
        },
        "programs": programs,
        "script_flags": {step: _script_flags(files[f]) for step, f in SCRIPT_FLAGS.items()},
        "yaml_keys": {f.removeprefix("maxtext/configs/"): _yaml_keys(files[f])
                      for f in FILES if f.endswith(".yml")},
    }


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    data = build(Path(sys.argv[1]))
    OUT.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    counts = {p: len(v["keys"]) for p, v in data["programs"].items()}
    print(f"wrote {OUT} from {data['provenance']['package']}: {counts}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
