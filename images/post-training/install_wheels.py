"""Install a package into the post-training image from the wheels in the build context.

Runs on the base image's own ``python3`` (stdlib only), in a build without network:

1. Every wheel in the folder must be one the lock names by its sha256, and every locked
   package must have its wheel there (a stray or altered file stops the build, named). The
   flow checked them when it put them in the context; this checks what the build received.
2. pip runs from its own wheel (``python3 pip-*.whl/pip``, a use pip's ``__main__``
   provides for), so a base without pip (the tests' stand-in) installs exactly like the
   real base, with the pinned pip rather than whichever one the base has.
3. ``pip install --no-index --find-links FOLDER NAME==VERSION`` with pip's only-if-needed
   strategy: a requirement the base already meets (the real base has requests, protobuf,
   pydantic... for MaxText) is left as the base has it; only what is missing or out of
   range comes from the folder. The build log lists what was added and what was replaced.
4. The package must then import in a fresh interpreter, at the locked version.

    python3 install_wheels.py LOCK FOLDER --runner pip --install wandb
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

PIN = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9_.-]*)==(?P<version>\S+)\s*\\?\s*$")
HASH = re.compile(r"^\s+--hash=sha256:(?P<digest>[0-9a-f]{64})\s*\\?\s*$")
MARKER = "tpurl: WHEELS:"


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def read_lock(text: str) -> dict[str, tuple[str, str]]:
    """Normalized name -> (version, sha256); exactly one hash per pin (the image's file)."""
    pins: dict[str, tuple[str, list[str]]] = {}
    current = None
    for line in text.splitlines():
        if match := PIN.match(line):
            current = normalize(match["name"])
            pins[current] = (match["version"], [])
        elif (match := HASH.match(line)) and current is not None:
            pins[current][1].append(match["digest"])
    bad = sorted(name for name, (_, hashes) in pins.items() if len(hashes) != 1)
    if bad:
        raise SystemExit(f"{MARKER} the lock needs exactly one --hash per pin; not so for {bad}")
    return {name: (version, hashes[0]) for name, (version, hashes) in pins.items()}


def check_wheels(lock: dict[str, tuple[str, str]], folder: Path) -> dict[str, Path]:
    """Name -> wheel file, every file accounted for by the lock (or the build stops)."""
    by_digest = {hashlib.sha256(path.read_bytes()).hexdigest(): path
                 for path in sorted(folder.glob("*.whl"))}
    locked = {digest: name for name, (_, digest) in lock.items()}
    stray = sorted(path.name for digest, path in by_digest.items() if digest not in locked)
    missing = sorted(name for name, (_, digest) in lock.items() if digest not in by_digest)
    if stray or missing:
        raise SystemExit(f"{MARKER} the wheels in {folder} are not the locked ones: "
                         f"not in the lock (sha256): {stray}; locked but absent: {missing}")
    return {name: by_digest[digest] for name, (_, digest) in lock.items()}


def installed() -> dict[str, str]:
    return {normalize(d.metadata["Name"]): d.version for d in importlib.metadata.distributions()
            if d.metadata["Name"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("lock", type=Path)
    parser.add_argument("folder", type=Path)
    parser.add_argument("--runner", required=True, help="the locked pip that runs the install")
    parser.add_argument("--install", required=True, help="the locked package to install")
    parser.add_argument("--module", help="its import name (default: the package name)")
    args = parser.parse_args(argv)
    lock = read_lock(args.lock.read_text())
    target, runner = normalize(args.install), normalize(args.runner)
    for name in (target, runner):
        if name not in lock:
            raise SystemExit(f"{MARKER} {name} is not pinned in {args.lock}")
    wheels = check_wheels(lock, args.folder)
    before = installed()
    version = lock[target][0]
    subprocess.run([sys.executable, str(wheels[runner] / "pip"), "install", "--no-index",
                    "--find-links", str(args.folder), "--upgrade-strategy", "only-if-needed",
                    "--no-cache-dir", "--disable-pip-version-check", "--root-user-action=ignore",
                    f"{args.install}=={version}"], check=True)
    after = installed()
    added = sorted(f"{n}=={v}" for n, v in after.items() if n not in before)
    replaced = sorted(f"{n} {before[n]} -> {v}" for n, v in after.items()
                      if n in before and before[n] != v)
    print(f"tpurl: installed {added}; replaced in the base: {replaced or 'none'}", flush=True)
    module = args.module or args.install.replace("-", "_")
    probe = f"import {module}, importlib.metadata as m; print(m.version({args.install!r}))"
    found = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True,
                           text=True).stdout.strip()
    if found != version:
        raise SystemExit(f"{MARKER} {args.install} imports at {found}, not the locked {version}")
    print(f"tpurl: {module} {found} imports", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
