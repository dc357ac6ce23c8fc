"""Teardown: destroy the same deployment (restored from the bucket); the bucket only with its
name typed again, and never when the destroy failed."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from flows.backends.gke.infra import clients
from flows.backends.gke.infra.destroy import confirmation_problem, teardown
from flows.backends.gke.infra.provision import provision
from flows.backends.gke.infra.settings import InfraSettings
from flows.core.failures import StageFailed
from tests.fakes.cloud import Cloud
from tests.support.logs import Log
from tests.support.profiles import INFRA_OVERRIDES


def _deployed(settings: InfraSettings, cloud: Cloud, gcs: Any) -> None:
    provision(settings, cloud.apis, gcs, Log())
    shutil.rmtree(settings.cache_dir / "gcluster")  # teardown runs elsewhere, later


@pytest.mark.parametrize("delete,confirm", [(True, None), (True, ""), (True, "my-tpurl"),
                                            (True, "other-bucket")])
def test_bucket_is_never_deleted_without_the_typed_confirmation(
        delete: bool, confirm: str | None, settings: InfraSettings, cloud: Cloud,
        gcs: Any) -> None:
    _deployed(settings, cloud, gcs)
    before = len(cloud.calls("gcluster"))
    with pytest.raises(StageFailed) as err:
        teardown(settings, cloud.apis, gcs, Log(), delete_bucket=delete, confirm_bucket=confirm)
    assert "nothing was removed" in str(err.value)
    assert "--delete-bucket --confirm-bucket my-tpurl-bucket" in str(err.value)
    assert gcs.lookup_bucket("my-tpurl-bucket") is not None
    assert len(cloud.calls("gcluster")) == before  # not even the cluster was touched


def test_confirmation_rules(settings: InfraSettings) -> None:
    assert confirmation_problem(settings, False, None) is None
    assert confirmation_problem(settings, True, "my-tpurl-bucket") is None
    assert confirmation_problem(settings, True, "gs://my-tpurl-bucket/") is None
    assert confirmation_problem(settings, True, "my-tpurl-bucket2") is not None


def test_teardown_destroys_the_restored_deployment_and_keeps_the_bucket(
        settings: InfraSettings, cloud: Cloud, gcs: Any) -> None:
    _deployed(settings, cloud, gcs)
    report = teardown(settings, cloud.apis, gcs, Log())
    destroy = cloud.calls("gcluster")[-1]
    assert destroy == ["destroy", "tpurl-v6e", "--auto-approve",
        "--download-dependencies"]
    assert cloud.state()["clusters"] == {}
    assert gcs.lookup_bucket("my-tpurl-bucket") is not None
    assert any("gcluster destroy" in r for r in report.removed)
    assert any(k.startswith("gs://my-tpurl-bucket:") for k in report.kept)
    assert report.pool_chip_hours is not None and report.pool_chip_hours >= 0
    assert "kept     gs://my-tpurl-bucket" in report.render()


def test_failed_destroy_keeps_the_bucket_even_when_confirmed(
        settings: InfraSettings, cloud: Cloud, gcs: Any) -> None:
    _deployed(settings, cloud, gcs)
    cloud.cue("gcluster destroy", "fail-not-empty")
    with pytest.raises(StageFailed) as err:
        teardown(settings, cloud.apis, gcs, Log(), delete_bucket=True,
                 confirm_bucket="my-tpurl-bucket")
    assert "the bucket was not touched" in str(err.value)
    assert "empty them" in str(err.value)
    assert gcs.lookup_bucket("my-tpurl-bucket") is not None
    assert "tpurl-v6e" in cloud.state()["clusters"]


def test_confirmed_teardown_removes_cluster_and_bucket(settings: InfraSettings, cloud: Cloud,
                                                       gcs: Any) -> None:
    _deployed(settings, cloud, gcs)
    report = teardown(settings, cloud.apis, gcs, Log(), delete_bucket=True,
                      confirm_bucket="my-tpurl-bucket")
    assert gcs.lookup_bucket("my-tpurl-bucket") is None
    assert any(r.startswith("gs://my-tpurl-bucket (") for r in report.removed)
    assert not settings.workdir.exists()


def test_nothing_to_destroy(settings: InfraSettings, cloud: Cloud, gcs: Any) -> None:
    report = teardown(settings, cloud.apis, gcs, Log())
    assert report.removed == [] and "nothing to destroy" in report.notes[0]
    assert cloud.calls() == []


def test_teardown_flow(prefect_api: None, settings: InfraSettings, cloud: Cloud, gcs: Any,
                       monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
                       ) -> None:
    from flows.operations.teardown import teardown_flow

    _deployed(settings, cloud, gcs)
    monkeypatch.setenv("TPURL_CACHE_DIR", str(Path(settings.cache_dir)))
    monkeypatch.setattr(clients, "default_clients", lambda s: (cloud.apis, gcs))
    report = teardown_flow(profile="qwen3-30b-a3b-v6e-32", overrides=INFRA_OVERRIDES)
    assert cloud.calls("gcluster")[-1] == ["destroy", "tpurl-v6e", "--auto-approve",
        "--download-dependencies"]
    assert gcs.lookup_bucket("my-tpurl-bucket") is not None
    assert any("gcluster destroy" in r for r in report.removed)
    assert "teardown of my-proj-123/us-east5/tpurl-v6e" in capsys.readouterr().out


def test_teardown_knows_when_it_runs_inside_a_cluster() -> None:
    from flows.operations.teardown import METADATA_CLUSTER, current_gke_cluster

    asked: list[str] = []

    def metadata(url: str) -> str:
        asked.append(url)
        return "tpurl-v6e"

    assert current_gke_cluster({}, metadata) is None and not asked  # not in a pod: no request
    assert current_gke_cluster({"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, metadata) == "tpurl-v6e"
    assert asked == [METADATA_CLUSTER]


def test_the_metadata_read_sends_the_flavor_and_reads_no_answer_as_no_cluster() -> None:
    """The read the guard makes, against a local server that answers as GCE's metadata server
    does: the attribute's value as text with ``Metadata-Flavor: Google`` in the request, 403
    without it; 404 for an attribute the VM lacks (a GCE VM that is no GKE node). Anything
    but a name, or no server at all (off Google Cloud), is no cluster."""
    from http.server import BaseHTTPRequestHandler

    from flows.operations.teardown import _metadata
    from tests.support.local_http import serving
    from tests.support.net import free_port

    attributes = {"/computeMetadata/v1/instance/attributes/cluster-name": "tpurl-v6e\n",
                  "/computeMetadata/v1/instance/attributes/empty": ""}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            found = attributes.get(self.path)
            status = (403 if self.headers.get("Metadata-Flavor") != "Google"
                      else 404 if found is None else 200)
            body = (found or "").encode() if status == 200 else b"no"
            self.send_response(status)
            self.send_header("Metadata-Flavor", "Google")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    with serving(Handler) as url:
        base = f"{url}/computeMetadata/v1/instance/attributes"
        assert _metadata(f"{base}/cluster-name") == "tpurl-v6e"
        assert _metadata(f"{base}/empty") is None
        assert _metadata(f"{base}/missing") is None
    assert _metadata(f"http://127.0.0.1:{free_port()}/computeMetadata/v1/") is None


def test_teardown_refuses_to_destroy_the_cluster_it_runs_on(cloud: Cloud, monkeypatch) -> None:
    from flows.core.failures import StageFailed
    from flows.operations import teardown as module

    monkeypatch.setattr(module, "current_gke_cluster", lambda: "tpurl-v6e")
    with pytest.raises(StageFailed, match="running inside tpurl-v6e itself"):
        module.teardown_flow(profile="qwen3-30b-a3b-v6e-32", overrides=INFRA_OVERRIDES)
    assert not cloud.calls("gcluster")  # nothing was touched


def test_teardown_deployment_never_runs_on_the_kubernetes_pool() -> None:
    import yaml

    from flows.common.paths import REPO_ROOT

    deployments = yaml.safe_load((REPO_ROOT / "prefect.yaml").read_text())["deployments"]
    (teardown,) = [d for d in deployments if d["entrypoint"].endswith(":teardown_flow")]
    assert teardown["work_pool"]["name"] == "tpurl-process"
    assert teardown["concurrency_limit"]["limit"] == 1


def test_teardown_in_reservation_mode_says_the_reservation_still_bills(
        settings: InfraSettings, cloud: Cloud, gcs: Any) -> None:
    """Compute Engine bills a reservation while it exists, consumed or not; gcluster destroy
    removes the pool only, so the report must not leave the user believing billing stopped."""
    from flows.config import load_profile
    from flows.operations.teardown import teardown_preview

    _deployed(settings, cloud, gcs)
    report = teardown(settings, cloud.apis, gcs, Log())
    text = report.render()
    assert ("kept     reservation my-v6e-res in us-east5-b: Compute Engine bills its hosts "
            "while it exists, consumed or not (the pool's $86.40/h); to end it: gcloud compute "
            "reservations delete my-v6e-res --zone=us-east5-b --project=my-proj-123") in text
    preview = "\n".join(teardown_preview(load_profile(
        "qwen3-30b-a3b-v6e-32", INFRA_OVERRIDES, environ={}), delete_bucket=False))
    assert "kept: reservation my-v6e-res in us-east5-b" in preview


def test_teardown_after_a_switch_of_capacity_counts_the_pool_it_destroys(
        settings: InfraSettings, cloud: Cloud, gcs: Any) -> None:
    """Deployed as reservation (a static pool, billed since deploy), then the profile set to
    on-demand without a run: the destroyed pool is still the static one, and its chip-hours
    are reported; the reverse, an on-demand pool torn down under a reservation profile, held
    nothing while idle."""
    from tests.support.profiles import with_gke

    _deployed(settings, cloud, gcs)
    on_demand = with_gke(settings, capacity="on-demand", reservation=None)
    report = teardown(on_demand, cloud.apis, gcs, Log())
    assert report.pool_chip_hours is not None and report.pool_usd is not None
    assert not any("reservation" in k for k in report.kept)

    _deployed(on_demand, cloud, gcs)
    assert teardown(settings, cloud.apis, gcs, Log()).pool_chip_hours is None


PRICES = {"gke.prices.spot.usd_per_chip_hour": "1.0", "gke.prices.spot.source": "a quote",
          "gke.prices.spot.as_of": "2026-12-01",
          "gke.prices.flex-start.usd_per_chip_hour": "1.5",
          "gke.prices.flex-start.source": "a quote", "gke.prices.flex-start.as_of": "2026-12-01"}
# What the pool deployed in each mode bills (8 hosts x 4 chips), at that mode's price
POOL_RATE = {
    "reservation": "(reservation, as deployed) costs $86.40/h (static reservation pool: billed "
                   "while it exists) at $2.70/chip-hour (reservation price)",
    "on-demand": "(on-demand, as deployed) costs $0.00/h while no job holds TPU nodes, $86.40/h "
                 "while one does (on-demand pool scales from zero) at $2.70/chip-hour "
                 "(on-demand price)",
    "spot": "(spot, as deployed) costs $0.00/h while no job holds TPU nodes, $32.00/h while one "
            "does (spot pool scales from zero) at $1.00/chip-hour (spot price)",
    "flex-start": "(flex-start, as deployed) costs $0.00/h while no job holds TPU nodes, "
                  "$48.00/h while one does (flex-start pool scales from zero) at "
                  "$1.50/chip-hour (flex-start price)"}
@pytest.mark.parametrize("deployed", list(POOL_RATE))
def test_the_teardown_preview_prices_the_pool_it_destroys_by_its_own_mode(
        deployed: str, tmp_path: Path, cloud: Cloud, gcs: Any,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A pool deployed as spot, the profile then set to on-demand without a run: the preview
    must not quote the on-demand rate for the spot pool `tpurl teardown` is about to delete. It
    reads the cluster (as `tpurl status` does) and prices each TPU pool by the mode it bills
    in, whatever the profile's mode (each of the four, one deploy); `tpurl teardown` without
    --yes and without a terminal stops after the preview."""
    from flows.backends.gke.infra.infra_stage import run_gke
    from flows.cli import main
    from tests.support.profiles import TUTORIAL, capacity_overrides, capacity_profile

    monkeypatch.setattr(clients, "default_clients", lambda s: (cloud.apis, gcs))
    monkeypatch.setenv("TPURL_CACHE_DIR", str(tmp_path / "cache"))
    run_gke(capacity_profile(deployed), Log())
    for now in POOL_RATE:
        sets = {**INFRA_OVERRIDES, **capacity_overrides(now), **PRICES}
        code = main(["teardown", *[f"--set={k}={v}" for k, v in sets.items()], TUTORIAL])
        out, err = capsys.readouterr()
        assert code == 2 and "not confirmed" in err, out + err  # nothing was torn down
        assert cloud.state()["clusters"]  # the cluster is still there
        [line] = [x for x in out.splitlines() if x.startswith("  TPU pool ")]
        assert line.endswith(POOL_RATE[deployed]), (now, line)
        note = (f"is {deployed}, the profile's gke.capacity is {now}: it is priced as the "
                "pool it is")
        assert (note in out) is (deployed != now), (now, out)


def test_the_preview_without_a_cluster_read_prices_the_profile_and_says_so() -> None:
    from flows.config import load_profile
    from flows.operations.teardown import teardown_preview

    profile = load_profile("qwen3-30b-a3b-v6e-32", INFRA_OVERRIDES, environ={})
    unread = "\n".join(teardown_preview(profile, False, None, "no Google credentials"))
    assert ("  the TPU pool costs $86.40/h (static reservation pool: billed while it exists) "
            "at $2.70/chip-hour (cluster not read: no Google credentials; priced at the "
            "profile's gke.capacity)") in unread
    gone = "\n".join(teardown_preview(profile, False, None, ""))
    assert "no cluster tpurl-v6e found now: no TPU pool bills" in gone


def test_an_unreadable_cluster_leaves_the_preview_on_the_profiles_figures(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Never fatal: no Google client (the teardown itself then says why, once, with the
    fix) or a refused read gives the reason the preview prints, and no cluster."""
    from flows.config import load_profile
    from flows.core.failures import user_error
    from flows.operations.teardown import live_cluster

    profile = load_profile("qwen3-30b-a3b-v6e-32", INFRA_OVERRIDES, environ={})

    def no_credentials(s: Any) -> Any:
        raise user_error("infra", "no Google credentials for the infra stage", "", "login")
    monkeypatch.setattr(clients, "default_clients", no_credentials)
    assert live_cluster(profile) == (None, "no Google client here")

    class Denied:
        def get_cluster(self, *args: str) -> None:
            raise PermissionError("403 caller lacks container.clusters.get\nmore")
    monkeypatch.setattr(clients, "default_clients", lambda s: (Denied(), None))
    assert live_cluster(profile) == (None, "403 caller lacks container.clusters.get")


def test_teardown_refuses_a_cluster_holding_a_tpu_pool_it_did_not_create(
        settings: InfraSettings, cloud: Cloud, gcs: Any) -> None:
    """gcluster destroy deletes the cluster with every pool in it: a TPU pool neither in the
    deployment record (its tpu_pools) nor planned for the profile is someone else's, so
    nothing is destroyed and the fix names it; the record's and the planned pools are ours."""
    from tests.fakes.cloud import fakecloud_state as fc

    _deployed(settings, cloud, gcs)
    state = fc.load()
    cluster = state["clusters"]["tpurl-v6e"]
    ours = next(p for p in cluster["nodePools"] if p["name"] == "gke-tpu-v6e-pool")
    cluster["nodePools"].append({**ours, "name": "team-b-v6e"})
    fc.save(state)
    before = len(cloud.calls("gcluster"))
    with pytest.raises(StageFailed) as err:
        teardown(settings, cloud.apis, gcs, Log())
    text = str(err.value)
    assert "TPU node pool(s) tpurl did not create: team-b-v6e" in text
    assert "gcloud container node-pools delete team-b-v6e --cluster=tpurl-v6e" in text
    assert len(cloud.calls("gcluster")) == before and fc.load()["clusters"]
    cluster["nodePools"].pop()
    fc.save(state)
    assert any("gcluster destroy" in r for r in teardown(settings, cloud.apis, gcs, Log()).removed)
