"""A stand-in for the tpu_post_training base image, built locally (no hub is reachable).

It carries what the patch step touches, at the paths the real image has: the real upstream
files of the pinned versions (tunix at the image's commit c4ec573d in site-packages, as
MaxText 0.2.4's post-training install puts it there; MaxText 0.2.4 under
/deps/src/maxtext, importable through a .pth like an editable install) and a Python 3.12
that can run the patch tool (stdlib + PyYAML), with the system libraries a manylinux wheel may
assume (the build installs wandb's wheels into it). No pip, as in a minimal base: the build
runs the locked pip from its wheel either way (images/post-training/install_wheels.py).

Where the Python comes from: no Python image can be pulled, so the host's own 3.12 install
(``sys.base_prefix``) is copied in (stdlib without tests/tk/idle, lib-dynload, libpython)
together with the shared libraries ``ldd`` says it needs, at their host paths, plus Debian's
busybox-static for a shell. FROM scratch + COPY gives one layer, which keeps vfs (a full copy
per layer) cheap. Running the patch step in a builder stage on the host Python instead would
not test the real thing: the tool must resolve files through the *image's* importer.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from collections.abc import Callable
from pathlib import Path

import docker
import yaml

from tests.support.upstream_wheels import image_tunix_wheel, pypi_wheel

SITE = "usr/local/lib/python3.12/site-packages"
PACKAGE_HOME = {"tunix": SITE, "maxtext": "deps/src"}  # where the real image keeps them
STDLIB_SKIP = {"site-packages", "test", "idlelib", "tkinter", "turtledemo", "ensurepip",
               "lib2to3", "__pycache__", "tests"}
BUSYBOX = Path("/bin/busybox")
APPLETS = ("sh", "ls", "cat", "env", "grep", "find", "head")
# What a manylinux wheel may take from the system (PEP 599's library list, kept by PEP 600),
# less the X11/GL/GLib ones: the real base (an Ubuntu-based JAX image) has them, and the
# wheels the build installs need them (pydantic-core links libgcc_s and librt). Those the
# host lacks (libnsl is optional in glibc) are left out.
MANYLINUX_LIBS = ("libgcc_s.so.1", "libstdc++.so.6", "libm.so.6", "libdl.so.2", "librt.so.1",
                  "libc.so.6", "libnsl.so.1", "libutil.so.1", "libpthread.so.0", "libresolv.so.2")
HOST_LIB_DIR = Path("/lib/x86_64-linux-gnu")

Edit = Callable[[Path], None]
# The versions with which the rehearsal measured the Adafactor patch failing
# (images/post-training/patches.yaml, maxtext-adafactor's failed_in_rehearsal), and the same
# but tunix: a base the measured failure does not apply to.
MEASURED = {"maxtext": "0.2.4", "google-tunix": "0.1.7", "jax": "0.11.0"}
OTHER_TUNIX = {**MEASURED, "google-tunix": "0.2.0"}


def _copy(src: Path, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(src, dest, follow_symlinks=True)


def _shared_libs(binaries: list[Path]) -> set[Path]:
    libs: set[Path] = set()
    for binary in binaries:
        out = subprocess.run(["ldd", str(binary)], capture_output=True, text=True).stdout
        for line in out.splitlines():
            parts = line.split()
            if "=>" in parts and len(parts) > 2 and parts[2].startswith("/"):
                libs.add(Path(parts[2]))
            elif parts and parts[0].startswith("/"):
                libs.add(Path(parts[0]))  # the dynamic loader
    return libs


def _python_tree(root: Path) -> None:
    home = Path(sys.base_prefix)
    stdlib = Path(sysconfig.get_paths(vars={"base": str(home), "installed_base": str(home)})
                  ["stdlib"])
    _copy(home / "bin" / "python3.12", root / "usr/local/bin/python3.12")
    (root / "usr/local/bin/python3").symlink_to("python3.12")
    shutil.copytree(stdlib, root / "usr/local/lib/python3.12",
                    ignore=lambda d, names: [n for n in names if n in STDLIB_SKIP or
                                             n.startswith(("config-", "_tkinter"))])
    binaries = [home / "bin" / "python3.12",
                *sorted((root / "usr/local/lib/python3.12/lib-dynload").glob("*.so"))]
    policy = {HOST_LIB_DIR / name for name in MANYLINUX_LIBS if (HOST_LIB_DIR / name).exists()}
    for lib in _shared_libs(binaries) | policy:
        if lib.name.startswith("libpython"):
            _copy(lib, root / "lib/x86_64-linux-gnu" / lib.name)
        else:
            _copy(lib, root / str(lib).lstrip("/"))
    site = root / SITE
    shutil.copytree(Path(yaml.__file__).parent, site / "yaml",
                    ignore=shutil.ignore_patterns("__pycache__"))


def _upstream_packages(root: Path) -> None:
    for package, wheel_path in (("tunix", image_tunix_wheel()),
                                ("maxtext", pypi_wheel("maxtext==0.2.4"))):
        home = root / PACKAGE_HOME[package]
        with zipfile.ZipFile(wheel_path) as wheel:
            for member in wheel.namelist():
                if member.startswith(f"{package}/") and member.endswith(".py"):
                    wheel.extract(member, home)
    (root / SITE / "maxtext-src.pth").write_text("/deps/src\n")


def standin_context(directory: Path, edit: Edit | None = None) -> Path:
    """Write the build context (rootfs/ + Dockerfile); ``edit`` may change the rootfs
    first, e.g. to play an upstream release in which a patched line moved."""
    if directory.exists():
        shutil.rmtree(directory)
    root = directory / "rootfs"
    _copy(BUSYBOX, root / "bin/busybox")
    for applet in APPLETS:
        (root / "bin" / applet).symlink_to("busybox")
    _python_tree(root)
    _upstream_packages(root)
    (root / "tmp").mkdir(mode=0o1777)
    os.chmod(root / "tmp", 0o1777)
    if edit is not None:
        edit(root)
    (directory / "Dockerfile").write_text(
        "FROM scratch\nCOPY rootfs/ /\n"
        "ENV PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8\n"
        'CMD ["python3"]\n')
    return directory


def build_standin(client: docker.DockerClient, ref: str, workdir: Path,
                  edit: Edit | None = None) -> str:
    """Build the stand-in base, push it to its (local) registry, return ``ref``."""
    context = standin_context(workdir, edit)
    client.images.build(path=str(context), tag=ref, rm=True, forcerm=True, network_mode="none")
    repository, tag = ref.rsplit(":", 1)
    for event in client.api.push(repository, tag=tag, stream=True, decode=True):
        if "error" in event:
            raise RuntimeError(f"pushing the stand-in base {ref}: {event['error']}")
    return ref


def move_pattern(root: Path) -> None:
    """An upstream release that reformatted the annotation the first tunix patch targets."""
    sampler = root / SITE / "tunix/generate/vllm_sampler.py"
    sampler.write_text(sampler.read_text().replace("reshard_chunk_size: Optional[int] = None",
                                                   "reshard_chunk_size: int | None = None"))


def with_distributions(versions: dict[str, str]) -> Edit:
    """A base whose installed distributions are ``versions`` (name → version), as pip leaves
    them: ``NAME-VERSION.dist-info/METADATA`` in site-packages, which importlib.metadata (and
    so `pip freeze`) reads. The real image has them; the plain stand-in carries files only."""
    def edit(root: Path) -> None:
        for name, version in versions.items():
            info = root / SITE / f"{name.replace('-', '_')}-{version}.dist-info"
            info.mkdir(parents=True, exist_ok=True)
            (info / "METADATA").write_text(
                f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    return edit
