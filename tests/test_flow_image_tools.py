"""The flow image's Terraform and Packer are what the pinned gcluster resolves, so gcluster
downloads neither in a pod (the image had Terraform 1.9.8, older than the 1.12.2
gcluster pins, and no Packer, so a pod would download both at run time, needing egress).

Tested as data: the CLOUD_TOOLS=1 image cannot be built here (HashiCorp's, Google's and
GitHub's downloads are unreachable), and neither can the v1.103.0 bundle be fetched to read
its pins. The pins below are read from the Cluster Toolkit source instead:
GoogleCloudPlatform/cluster-toolkit pkg/dependencies/checksums_generated.go (TerraformVersion,
PackerVersion, ExpectedChecksums; last changed in 1cca13ecd, unchanged at develop 1047080375,
after v1.95.0), and the decision gcluster takes on them is pkg/dependencies/resolver.go
``ensureBinary`` (downloads Terraform when missing from PATH or older, equal or newer is
used; downloads Packer only when missing). The installer's own download and check run for
real below, against a local archive.
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
import zipfile
from pathlib import Path
from types import ModuleType

import pytest

from flows.config.gke import GkeCluster

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "images/flow/Dockerfile"
UPSTREAM = {  # checksums_generated.go, linux_amd64
    "TERRAFORM_VERSION": "1.12.2",
    "TERRAFORM_SHA256": "1eaed12ca41fcfe094da3d76a7e9aa0639ad3409c43be0103ee9f5a1ff4b7437",
    "PACKER_VERSION": "1.15.0",
    "PACKER_SHA256": "2fd1149c5c6c7604ced64d7b56638af05f6b7ed3f6835182bc913ddaba1f16b8",
}


def _args() -> dict[str, str]:
    return dict(re.findall(r"^ARG (\w+)=(\S+)$", DOCKERFILE.read_text(), re.M))


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split("."))


def gcluster_downloads(on_path: dict[str, str | None], pins: dict[str, str]) -> list[str]:
    """What gcluster's ensureBinary would download, given the versions on PATH."""
    out = []
    terraform = on_path.get("terraform")
    if terraform is None or _version(terraform) < _version(pins["TERRAFORM_VERSION"]):
        out.append("terraform")
    if on_path.get("packer") is None:
        out.append("packer")
    return out


def test_the_image_pins_what_gcluster_resolves_so_it_downloads_nothing() -> None:
    args = _args()
    assert {k: args.get(k) for k in UPSTREAM} == UPSTREAM
    image = {"terraform": args["TERRAFORM_VERSION"], "packer": args["PACKER_VERSION"]}
    assert gcluster_downloads(image, UPSTREAM) == []
    # the old image: Terraform 1.9.8 and no Packer would both be downloaded
    assert gcluster_downloads({"terraform": "1.9.8", "packer": None}, UPSTREAM) == [
        "terraform", "packer"]


def test_the_tools_land_on_the_images_path_and_the_bundle_matches_the_profile() -> None:
    text = DOCKERFILE.read_text()
    assert "install_cloud_tools.py /opt/cloud-tools" in text
    assert re.search(r"PATH=[^\n]*/opt/cloud-tools/bin", text)  # where exec.LookPath looks
    for arg in UPSTREAM:
        assert f'"${arg}"' in text, f"{arg} is not passed to the installer"
    assert _args()["CLUSTER_TOOLKIT_VERSION"] == GkeCluster.model_fields[
        "cluster_toolkit_version"].default


def _installer() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "install_cloud_tools", ROOT / "images/flow/install_cloud_tools.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_installer_checks_gclusters_sha256_and_installs_into_bin(tmp_path: Path) -> None:
    installer = _installer()
    releases = tmp_path / "releases"
    releases.mkdir()
    archive = releases / "packer_1.15.0_linux_amd64.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.writestr("packer", "#!/bin/sh\necho packer\n")
    good = hashlib.sha256(archive.read_bytes()).hexdigest()
    installer.HASHICORP_URL = f"file://{releases}/{{name}}_{{version}}_linux_amd64.zip"
    with pytest.raises(SystemExit, match="gcluster expects"):
        installer.install_hashicorp(tmp_path / "bad", "packer", "1.15.0", "0" * 64)
    installer.install_hashicorp(tmp_path / "root", "packer", "1.15.0", good)
    binary = tmp_path / "root" / "bin" / "packer"
    assert binary.read_text().endswith("echo packer\n") and binary.stat().st_mode & 0o111


def test_the_cluster_toolkit_bundle_is_checked_before_it_is_unpacked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The image build never takes the bundle GitHub serves unchecked: its SHA-256
    comes from the build argument or deployments/cluster-toolkit.sha256; no known value
    stops the build before the download, a wrong one before the bundle is unpacked."""
    from tests.fakes.cloud import build_bundle

    installer = _installer()
    tgz = build_bundle(tmp_path / "releases" / "v1.103.0" / "gcluster_bundle_linux_amd64.tgz")
    good = hashlib.sha256(tgz.read_bytes()).hexdigest()
    monkeypatch.setattr(installer, "TOOLKIT_URL", (tmp_path / "releases").as_uri()
                        + "/{version}/gcluster_bundle_linux_amd64.tgz")
    with pytest.raises(SystemExit, match="no SHA-256 known"):
        installer.toolkit_checksum("v1.103.0", "", ROOT / "deployments" / "cluster-toolkit.sha256")
    table = tmp_path / "sums"
    table.write_text(f"# c\n{good.upper()}  v1.103.0/gcluster_bundle_linux_amd64.tgz\n")
    assert installer.toolkit_checksum("v1.103.0", "", table) == good
    assert installer.toolkit_checksum("v1.103.0", "AB" * 32, table) == "ab" * 32
    with pytest.raises(SystemExit, match="expected abab"):
        installer.install_cluster_toolkit(tmp_path / "root", tmp_path / "cache", "v1.103.0",
                                          "ab" * 32)
    assert not (tmp_path / "root" / "bin" / "gcluster").exists()
    installer.install_cluster_toolkit(tmp_path / "root", tmp_path / "cache", "v1.103.0", good)
    assert (tmp_path / "root" / "bin" / "gcluster").is_file()
