"""The bucket (against fake-gcs-server) and the Cluster Toolkit bundle (built locally)."""

from __future__ import annotations

import hashlib
import http.server
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from google.api_core import exceptions as gexc

from flows.backends.gke.infra import bucket as gcs_bucket
from flows.backends.gke.infra.bundle import BUNDLE_ENV, obtain_bundle, shipped_checksum, version_dir
from flows.backends.gke.infra.settings import InfraSettings
from flows.core.failures import StageFailed
from tests.fakes.cloud import build_bundle
from tests.support.gcs import gcs_client, gcs_server
from tests.support.local_http import serving
from tests.support.profiles import with_gke


def test_bucket_is_created_in_the_region_then_kept(gcs: Any, settings: InfraSettings) -> None:
    report = gcs_ensure(gcs, settings)
    assert report.created and report.location == "US-EAST5"
    assert gcs.lookup_bucket("my-tpurl-bucket") is not None
    again = gcs_ensure(gcs, settings)
    assert not again.created and again.location == "US-EAST5"


def gcs_ensure(client: Any, settings: InfraSettings, number: str | None = "0"):
    return gcs_bucket.ensure_bucket(client, settings, number)


def test_bucket_of_another_project_is_refused(gcs: Any, settings: InfraSettings) -> None:
    gcs.create_bucket("my-tpurl-bucket")
    with pytest.raises(StageFailed, match="belongs to another project"):
        gcs_ensure(gcs, settings, number="987654321")


def test_bucket_in_another_location_is_refused(settings: InfraSettings) -> None:
    with gcs_server("US-CENTRAL1") as url:
        client = gcs_client(url)
        client.create_bucket("my-tpurl-bucket")
        with pytest.raises(StageFailed) as err:
            gcs_ensure(client, settings)
        assert "is in US-CENTRAL1, not us-east5" in str(err.value)
        assert "use a bucket in us-east5" in str(err.value)


class _Forbidden:
    def lookup_bucket(self, name: str) -> None:
        raise gexc.Forbidden(f"GET b/{name}: caller does not have storage.buckets.get")


def test_forbidden_bucket_is_a_clear_error(settings: InfraSettings) -> None:
    with pytest.raises(StageFailed) as err:
        gcs_ensure(_Forbidden(), settings)
    assert "may not read it (403)" in str(err.value) and "choose another gke.bucket" in str(err.value)


def test_folder_sync_round_trip_skips_terraform_providers(gcs: Any, settings: InfraSettings,
                                                          tmp_path: Path) -> None:
    gcs_ensure(gcs, settings)
    src = tmp_path / "dep"
    (src / "primary" / ".terraform").mkdir(parents=True)
    (src / "primary" / "terraform.tfstate").write_text("serial=1")
    (src / "primary" / ".terraform" / "huge.bin").write_bytes(b"x")
    (src / "old.txt").write_text("old")
    assert gcs_bucket.upload_folder(gcs, "my-tpurl-bucket", src, "p/") == 2
    (src / "old.txt").unlink()
    assert gcs_bucket.upload_folder(gcs, "my-tpurl-bucket", src, "p/") == 1
    assert [b.name for b in gcs.list_blobs("my-tpurl-bucket", prefix="p/")] == [
        "p/primary/terraform.tfstate"]
    dest = tmp_path / "restored"
    assert gcs_bucket.download_folder(gcs, "my-tpurl-bucket", "p/", dest) == 1
    assert (dest / "primary" / "terraform.tfstate").read_text() == "serial=1"


@pytest.fixture
def release_server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    root = tmp_path / "releases"
    tgz = build_bundle(root / "v1.103.0" / "gcluster_bundle_linux_amd64.tgz")
    handler = lambda *a, **k: http.server.SimpleHTTPRequestHandler(  # noqa: E731
        *a, directory=str(root), **k)
    with serving(handler) as url:
        yield url, tgz


def test_bundle_is_downloaded_checksummed_and_cached(release_server, settings: InfraSettings,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(BUNDLE_ENV, raising=False)
    url, tgz = release_server
    digest = hashlib.sha256(tgz.read_bytes()).hexdigest()
    s = with_gke(settings, cluster_toolkit_sha256=digest).model_copy(
        update={"releases_url": url})
    bundle = obtain_bundle(s)
    assert bundle.sha256 == digest and bundle.gcluster.is_file()
    assert bundle.blueprint_example.name == "gke-tpu-v6e-advanced.yaml"
    record = json.loads((version_dir(s) / "bundle.json").read_text())
    assert record["sha256"] == digest and record["url"].endswith(
        "/v1.103.0/gcluster_bundle_linux_amd64.tgz")
    unreachable = s.model_copy(update={"releases_url": "http://127.0.0.1:9"})
    assert obtain_bundle(unreachable).sha256 == digest  # cached: no download needed
    cached = version_dir(s) / "gcluster_bundle_linux_amd64.tgz"
    cached.write_bytes(cached.read_bytes() + b"tampered")
    with pytest.raises(StageFailed, match="does not match the pinned checksum"):
        obtain_bundle(s)


def test_a_download_without_a_known_checksum_is_refused_before_it_starts(
        release_server, settings: InfraSettings, monkeypatch: pytest.MonkeyPatch) -> None:
    """No trust on first use (it would take whatever the release URL served): neither the
    profile nor deployments/cluster-toolkit.sha256 knows v1.103.0 here, so nothing is fetched."""
    monkeypatch.delenv(BUNDLE_ENV, raising=False)
    url, _ = release_server
    s = settings.model_copy(update={"releases_url": url})
    assert settings.gke.cluster_toolkit_sha256 is None
    assert shipped_checksum(s.gke.cluster_toolkit_version) is None
    with pytest.raises(StageFailed) as refused:
        obtain_bundle(s)
    assert refused.value.diagnosis.code == "infra/bundle-unverified"
    assert "gke.cluster_toolkit_sha256" in refused.value.diagnosis.fix
    assert not (version_dir(s) / "gcluster_bundle_linux_amd64.tgz").exists()


def test_the_shipped_checksum_is_enforced_before_extraction(
        release_server, settings: InfraSettings, monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    from flows.backends.gke.infra import bundle as bundle_module

    monkeypatch.delenv(BUNDLE_ENV, raising=False)
    url, tgz = release_server
    table = tmp_path / "cluster-toolkit.sha256"
    table.write_text("# comment\n" + "ab" * 32 + "  v1.103.0/gcluster_bundle_linux_amd64.tgz\n")
    monkeypatch.setattr(bundle_module, "SHIPPED_CHECKSUMS", table)
    monkeypatch.setattr(bundle_module, "REPO_ROOT", tmp_path)
    assert shipped_checksum("v1.103.0", table) == "ab" * 32
    s = settings.model_copy(update={"releases_url": url})
    with pytest.raises(StageFailed, match=r"cluster-toolkit\.sha256 says abab"):
        obtain_bundle(s)
    assert not (version_dir(s) / "bundle").exists()  # never extracted
    good = hashlib.sha256(tgz.read_bytes()).hexdigest()
    table.write_text(f"{good}  v1.103.0/gcluster_bundle_linux_amd64.tgz\n")
    assert obtain_bundle(s).sha256 == good


def test_bundle_pinned_checksum_is_enforced(cloud, settings: InfraSettings) -> None:
    pinned = with_gke(settings, cluster_toolkit_sha256="0" * 64)
    with pytest.raises(StageFailed, match="does not match the pinned checksum"):
        obtain_bundle(pinned)


def test_unreachable_release_gives_manual_instructions(settings: InfraSettings,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(BUNDLE_ENV, raising=False)
    s = with_gke(settings, cluster_toolkit_sha256="0" * 64).model_copy(
        update={"releases_url": "http://127.0.0.1:9"})  # a known checksum: it downloads
    with pytest.raises(StageFailed) as err:
        obtain_bundle(s)
    text = str(err.value)
    assert "cannot download Cluster Toolkit v1.103.0" in text
    assert "http://127.0.0.1:9/v1.103.0/gcluster_bundle_linux_amd64.tgz" in text
    assert BUNDLE_ENV in text and str(version_dir(s)) in text


@pytest.mark.parametrize("name", ["p//tmp/escaped", "p/primary/../../escaped"])
def test_a_deployment_object_named_outside_its_folder_is_refused(
        gcs: Any, settings: InfraSettings, tmp_path: Path, name: str) -> None:
    """Any writer of the bucket names objects: an absolute name after the prefix, or one
    climbing out, would have the restore write outside the deployment folder."""
    gcs_ensure(gcs, settings)
    target = tmp_path / "escaped"
    gcs.bucket("my-tpurl-bucket").blob(name.replace("/tmp/escaped", str(target))).upload_from_string("x")
    with pytest.raises(StageFailed, match="outside its folder"):
        gcs_bucket.download_folder(gcs, "my-tpurl-bucket", "p/", tmp_path / "restored" / "dep")
    assert not target.exists() and not (tmp_path / "restored" / "escaped").exists()
