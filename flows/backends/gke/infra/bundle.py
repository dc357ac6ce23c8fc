"""The pinned Cluster Toolkit bundle: fetched once per version, checksummed, extracted.

Why cache and record a checksum: the bundle holds the ``gcluster`` that owns the Terraform
state; a different binary on a later run would re-apply with different modules. The first
download's SHA-256 is recorded beside it, and every later use checks the file still matches
(and matches ``gke.cluster_toolkit_sha256`` when the profile pins one). GitHub releases are
the only source; where they cannot be reached the error says how to place the file by hand.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tarfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from flows.backends.gke.infra.settings import BLUEPRINT_EXAMPLE, BUNDLE_NAME, InfraSettings
from flows.core.failures import user_error
from flows.core.space import DiskFull, write_text, writing

BUNDLE_ENV = "TPURL_GCLUSTER_BUNDLE"


@dataclass(frozen=True)
class Bundle:
    version: str
    root: Path       # the folder holding gcluster and examples/
    gcluster: Path
    sha256: str

    @property
    def blueprint_example(self) -> Path:
        return self.root / BLUEPRINT_EXAMPLE


def version_dir(s: InfraSettings) -> Path:
    return s.cache_dir / "cluster-toolkit" / s.gke.cluster_toolkit_version


def manual_instructions(s: InfraSettings) -> str:
    target = version_dir(s) / BUNDLE_NAME
    return (f"download {s.bundle_url} on a machine that reaches GitHub, then either copy it to "
            f"{target} or set {BUNDLE_ENV}=/path/to/{BUNDLE_NAME}; check its SHA-256 against "
            "the release page and pin it as gke.cluster_toolkit_sha256")


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _download(url: str, dest: Path, timeout_s: float = 60.0) -> None:
    tmp = dest.with_name(dest.name + ".part")
    try:
        with writing(dest, "the Cluster Toolkit bundle"), \
                urllib.request.urlopen(url, timeout=timeout_s) as response, \
                tmp.open("wb") as out:
            shutil.copyfileobj(response, out)
    except BaseException:
        tmp.unlink(missing_ok=True)  # a partial download must not hold a full disk
        raise
    tmp.replace(dest)


def _fetch(s: InfraSettings, tgz: Path) -> None:
    manual = os.environ.get(BUNDLE_ENV)
    if manual:
        if not Path(manual).is_file():
            raise user_error("infra", f"{BUNDLE_ENV} names no file", manual,
                             manual_instructions(s))
        with writing(tgz, "the Cluster Toolkit bundle"):
            shutil.copyfile(manual, tgz)
        return
    try:
        _download(s.bundle_url, tgz)
    except DiskFull:
        raise  # this machine's disk, not the download: the storage error
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        raise user_error("infra",
            f"cannot download Cluster Toolkit {s.gke.cluster_toolkit_version}",
            f"GET {s.bundle_url} failed: {exc}", manual_instructions(s)) from None


def _check_digest(s: InfraSettings, tgz: Path, record_path: Path) -> str:
    digest = sha256_of(tgz)
    if s.gke.cluster_toolkit_sha256 and digest != s.gke.cluster_toolkit_sha256.lower():
        raise user_error("infra", "the Cluster Toolkit bundle does not match the pinned checksum",
                         f"{tgz}: sha256 {digest}, profile pins {s.gke.cluster_toolkit_sha256}",
                         f"delete {tgz} and fetch it again, or correct "
                         "gke.cluster_toolkit_sha256")
    if record_path.is_file():
        recorded = json.loads(record_path.read_text()).get("sha256")
        if recorded != digest:
            raise user_error("infra", "the cached Cluster Toolkit bundle changed since it was first used",
                             f"{tgz}: sha256 {digest}, recorded {recorded}",
                             f"delete {version_dir(s)} to fetch it again")
    else:
        write_text(record_path, json.dumps({
            "version": s.gke.cluster_toolkit_version, "url": s.bundle_url, "sha256": digest,
            "fetched_at": datetime.now(UTC).isoformat()}, indent=2) + "\n",
            "the Cluster Toolkit bundle's record")
    return digest


def _extract(tgz: Path, dest: Path, digest: str) -> Path:
    marker = dest / ".tpurl-sha256"
    if not (marker.is_file() and marker.read_text().strip() == digest):
        if dest.exists():
            shutil.rmtree(dest)
        dest.mkdir(parents=True)
        with writing(dest, "the extracted Cluster Toolkit bundle"), tarfile.open(tgz) as tar:
            tar.extractall(dest, filter="data")
        write_text(marker, digest + "\n", "the Cluster Toolkit bundle's marker")
    for candidate in (dest, *sorted(p for p in dest.iterdir() if p.is_dir())):
        if (candidate / "gcluster").is_file():
            return candidate
    raise user_error("infra", "the Cluster Toolkit bundle holds no gcluster binary", str(tgz),
                     f"delete {tgz.parent} and fetch the bundle again")


def obtain_bundle(s: InfraSettings) -> Bundle:
    """Return the extracted, verified bundle of the profile's version (download if needed)."""
    vdir = version_dir(s)
    vdir.mkdir(parents=True, exist_ok=True)
    tgz = vdir / BUNDLE_NAME
    if not tgz.is_file():
        _fetch(s, tgz)
    digest = _check_digest(s, tgz, vdir / "bundle.json")
    root = _extract(tgz, vdir / "bundle", digest)
    gcluster = root / "gcluster"
    gcluster.chmod(gcluster.stat().st_mode | 0o111)
    bundle = Bundle(s.gke.cluster_toolkit_version, root, gcluster, digest)
    if not bundle.blueprint_example.is_file():
        raise user_error("infra", f"the bundle has no {BLUEPRINT_EXAMPLE}",
                         f"Cluster Toolkit {s.gke.cluster_toolkit_version} at {root}",
                         "use a Cluster Toolkit version that ships the v6e example (v1.103.0)")
    return bundle
