"""Install the programs the GKE stages run into the flow image (images/flow/Dockerfile,
CLOUD_TOOLS=1): the Google Cloud CLI with gke-gcloud-auth-plugin, Terraform and Packer at the
versions gcluster resolves (so it downloads neither at run time), and the Cluster Toolkit
bundle (gcluster).

Why a script of the base's Python: slim images have no curl or unzip, and one script keeps
the pinned versions and official locations in one place. Terraform and Packer are checked
against the SHA256 gcluster itself expects (cluster-toolkit pkg/dependencies/
checksums_generated.go), passed in by the Dockerfile. The Cluster Toolkit bundle goes where
flows/backends/gke/infra/bundle.py looks for it before downloading
(``<cache>/cluster-toolkit/<version>/``), so a flow run needs no GitHub access, and gcluster
is also put on PATH for a pre-flight that looks for it there.

Unverified here: this machine reaches none of these hosts, so the tests build with
CLOUD_TOOLS=0.
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import tarfile
import urllib.request
import zipfile
from pathlib import Path

GCLOUD_URL = ("https://dl.google.com/dl/cloudsdk/channels/rapid/downloads/"
              "google-cloud-cli-{version}-linux-x86_64.tar.gz")
# gcluster's own download location (pkg/dependencies/downloader.go, urlFormat)
HASHICORP_URL = "https://releases.hashicorp.com/{name}/{version}/{name}_{version}_linux_amd64.zip"
TOOLKIT_URL = ("https://github.com/GoogleCloudPlatform/cluster-toolkit/releases/download/"
               "{version}/gcluster_bundle_linux_amd64.tgz")


def download(url: str, dest: Path) -> Path:
    dest.parent.mkdir(parents=True, exist_ok=True)
    with urllib.request.urlopen(url, timeout=300) as response, dest.open("wb") as out:
        while chunk := response.read(1 << 20):
            out.write(chunk)
    return dest


def install_gcloud(root: Path, version: str) -> None:
    archive = download(GCLOUD_URL.format(version=version), root / "gcloud.tar.gz")
    with tarfile.open(archive) as tar:
        tar.extractall(root, filter="data")
    archive.unlink()
    gcloud = root / "google-cloud-sdk" / "bin" / "gcloud"
    subprocess.run([str(gcloud), "components", "install", "gke-gcloud-auth-plugin", "--quiet"],
                   check=True)


def install_hashicorp(root: Path, name: str, version: str, sha256: str) -> None:
    """terraform or packer into ``root/bin`` (on the image's PATH, where gcluster's
    exec.LookPath finds it), checked against the SHA256 gcluster pins for linux_amd64."""
    archive = download(HASHICORP_URL.format(name=name, version=version), root / f"{name}.zip")
    actual = hashlib.sha256(archive.read_bytes()).hexdigest()
    if actual != sha256:
        raise SystemExit(f"{name} {version}: sha256 {actual}, gcluster expects {sha256}")
    with zipfile.ZipFile(archive) as zipped:
        zipped.extract(name, root / "bin")
    (root / "bin" / name).chmod(0o755)
    archive.unlink()


def toolkit_checksum(version: str, given: str, checksums: Path | None) -> str:
    """The SHA-256 the bundle must have: the build argument, else the repository's line for
    the version (deployments/cluster-toolkit.sha256); neither: the build stops (a download
    is never trusted on first use)."""
    if given.strip():
        return given.strip().lower()
    text = checksums.read_text() if checksums is not None and checksums.is_file() else ""
    for line in text.splitlines():
        words = line.split()
        if len(words) == 2 and not line.startswith("#") and \
                words[1] == f"{version}/gcluster_bundle_linux_amd64.tgz":
            return words[0].lower()
    raise SystemExit(f"Cluster Toolkit {version}: no SHA-256 known. Pass the build argument "
                     "CLUSTER_TOOLKIT_SHA256 (from the release page), or add the line to "
                     "deployments/cluster-toolkit.sha256")


def install_cluster_toolkit(root: Path, cache_dir: Path, version: str, sha256: str) -> None:
    bundle = download(TOOLKIT_URL.format(version=version),
                      cache_dir / "cluster-toolkit" / version / "gcluster_bundle_linux_amd64.tgz")
    actual = hashlib.sha256(bundle.read_bytes()).hexdigest()
    if actual != sha256:
        bundle.unlink()
        raise SystemExit(f"Cluster Toolkit {version}: sha256 {actual}, expected {sha256}")
    with tarfile.open(bundle) as tar:
        member = next(m for m in tar.getmembers() if Path(m.name).name == "gcluster" and m.isfile())
        member.name = "gcluster"
        tar.extract(member, root / "bin", filter="data")
    (root / "bin" / "gcluster").chmod(0o755)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path)
    parser.add_argument("--gcloud", required=True)
    parser.add_argument("--terraform", required=True)
    parser.add_argument("--terraform-sha256", required=True)
    parser.add_argument("--packer", required=True)
    parser.add_argument("--packer-sha256", required=True)
    parser.add_argument("--cluster-toolkit", required=True)
    parser.add_argument("--cluster-toolkit-sha256", default="")
    parser.add_argument("--checksums", type=Path, default=None)
    parser.add_argument("--cache-dir", type=Path, required=True)
    args = parser.parse_args()
    toolkit_sha256 = toolkit_checksum(args.cluster_toolkit, args.cluster_toolkit_sha256,
                                      args.checksums)  # before any download
    install_gcloud(args.root, args.gcloud)
    install_hashicorp(args.root, "terraform", args.terraform, args.terraform_sha256)
    install_hashicorp(args.root, "packer", args.packer, args.packer_sha256)
    install_cluster_toolkit(args.root, args.cache_dir, args.cluster_toolkit, toolkit_sha256)


if __name__ == "__main__":
    main()
