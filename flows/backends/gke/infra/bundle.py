"""The pinned Cluster Toolkit bundle: fetched once per version, checksummed, extracted.

Why cache and record a checksum: the bundle holds the ``gcluster`` that owns the Terraform
state; a different binary on a later run would re-apply with different modules. The first
use's SHA-256 is recorded beside it, and every later use checks the file still matches.

Which checksum a bundle must have, before it is extracted: the profile's
``gke.cluster_toolkit_sha256`` if it pins one, else the line the repository ships for the
version (deployments/cluster-toolkit.sha256). A bundle tpurl downloads itself is refused
when neither knows the version: whatever a mirror, a proxy or a changed release served
would otherwise be trusted on first use. A bundle the operator placed by hand
(``TPURL_GCLUSTER_BUNDLE``, or a file in the cache) with no known checksum is trusted on
first use, as the operator's own choice, and recorded. GitHub releases are the only
download source; where they cannot be reached the error says how to place the file by hand.
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
from flows.common.failure_codes import Failure
from flows.common.paths import REPO_ROOT
from flows.core.failures import user_error
from flows.core.safe_writes import DiskFull, write_text, writing

BUNDLE_ENV = "TPURL_GCLUSTER_BUNDLE"
SHIPPED_CHECKSUMS = REPO_ROOT / "deployments" / "cluster-toolkit.sha256"


def shipped_checksum(version: str, path: Path | None = None) -> str | None:
    """The SHA-256 the repository ships for ``version``'s bundle, or None."""
    path = path or SHIPPED_CHECKSUMS
    lines = path.read_text().splitlines() if path.is_file() else []
    for line in lines:
        words = line.split()
        if len(words) == 2 and not line.startswith("#") and \
                words[1] == f"{version}/{BUNDLE_NAME}":
            return words[0].lower()
    return None


def expected_checksum(s: InfraSettings) -> tuple[str, str] | None:
    """(sha256, where it comes from) a bundle of the profile's version must have, or None."""
    if s.gke.cluster_toolkit_sha256:
        return s.gke.cluster_toolkit_sha256.lower(), "the profile's gke.cluster_toolkit_sha256"
    shipped = shipped_checksum(s.gke.cluster_toolkit_version)
    return (shipped, str(SHIPPED_CHECKSUMS.relative_to(REPO_ROOT))) if shipped else None


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
    if expected_checksum(s) is None:  # never trust what a download serves on first use
        raise user_error("infra", f"no checksum is known for Cluster Toolkit "
                         f"{s.gke.cluster_toolkit_version}; refusing to download it",
                         f"{SHIPPED_CHECKSUMS.relative_to(REPO_ROOT)} has no line for it and "
                         "the profile pins no gke.cluster_toolkit_sha256",
                         "take the SHA-256 from the release page (or `sha256sum` of a bundle "
                         "you trust) and set gke.cluster_toolkit_sha256, or add the line to "
                         f"{SHIPPED_CHECKSUMS.relative_to(REPO_ROOT)}; or "
                         + manual_instructions(s), code=Failure.INFRA_BUNDLE_UNVERIFIED)
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
    if (expected := expected_checksum(s)) is not None and digest != expected[0]:
        raise user_error("infra", "the Cluster Toolkit bundle does not match the pinned checksum",
                         f"{tgz}: sha256 {digest}, {expected[1]} says {expected[0]}",
                         f"delete {tgz} and fetch it again, or correct {expected[1]}")
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
