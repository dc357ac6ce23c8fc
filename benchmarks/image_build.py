"""Benchmark: the patched image's full build + push against the skip path.

Starts Debian's dockerd and registry (scripts/docker-services.sh), builds the stand-in base
(tests/fakes/image_standin.py: the real upstream files, the host's Python) into a fresh registry
namespace, then times

    full  = ensure_image on a new content tag: pin base, build, patch, push
    skip  = ensure_image again: pin base, look the content tag up, return its digest

and prints both and full ÷ skip. vfs storage copies the whole filesystem per layer, so the
full build here is slower per MB than overlay2 on a real builder; the skip path is two
registry lookups whatever the image size, which is what keeps a rerun of the 10+ GB TPU
image cheap. A full run that did not build, or a skip that built or gave another digest,
exits non-zero. ``--quick`` (the tests' run, with the image tests' stand-in base:
``--base REF``, not built again) is one skip (``--repeats 1``).
Usage: .venv/bin/python benchmarks/image_build.py [--repeats N] [--base REF] [--quick]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from flows.backends.gke.image import ImageRequest, connect, ensure_image
from tests.fakes.image_standin import build_standin

REGISTRY = os.environ.get("TPURL_REGISTRY_ADDR", "127.0.0.1:5000")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="skip-path repetitions")
    parser.add_argument("--base", help="a stand-in base already pushed (default: build one)")
    parser.add_argument("--quick", action="store_true", help="one skip (the tests' run)")
    args = parser.parse_args()
    if args.quick:
        args.repeats = 1
    script = Path(__file__).resolve().parent.parent / "scripts" / "docker-services.sh"
    out = subprocess.run(["bash", str(script), "start"], check=True, capture_output=True, text=True)
    os.environ["DOCKER_HOST"] = out.stdout.strip().removeprefix("export DOCKER_HOST=")
    client = connect()
    prefix = f"{REGISTRY}/tpurl-bench-{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory() as tmp:
        started = time.monotonic()
        base = args.base or build_standin(client, f"{prefix}/standin:0.2.4", Path(tmp) / "ctx")
        standin_s = time.monotonic() - started
    request = ImageRequest(base=base, repository=f"{prefix}/tpu-post-training")
    full = ensure_image(request, client)
    assert full.built, "a fresh namespace must build"
    skips = []
    for _ in range(args.repeats):
        again = ensure_image(request, client)
        assert not again.built and again.digest == full.digest
        skips.append(again.seconds)
    skip = statistics.median(skips)
    size_mb = client.images.get(full.ref).attrs["Size"] / 1e6
    print(f"stand-in base (not part of the comparison): {standin_s:6.2f} s, image {size_mb:.0f} MB")
    print(f"full build + push:                           {full.seconds:6.2f} s")
    print(f"skip path (median of {args.repeats}):                     {skip:6.3f} s "
          f"(min {min(skips):.3f}, max {max(skips):.3f})")
    print(f"full / skip:                                 {full.seconds / skip:6.0f}x")
    print(f"digest: {full.ref}")
    if args.quick:  # the tests' disk: this run's reference goes (an image another name holds,
        import docker  # as a cached build may share, is only untagged)

        try:
            client.images.remove(full.ref)
        except docker.errors.APIError as exc:  # a disk concern only: the figures stand
            print(f"(the image was kept: {exc})")


if __name__ == "__main__":
    main()
