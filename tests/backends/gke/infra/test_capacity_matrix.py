"""Every capacity mode x every command on the tutorial profile: no combination ends in a
traceback (`tpurl plan` crashed for on-demand and spot while `validate` called the
profile valid).

Commands through the CLI's own ``main`` (validate, plan, plan --json, plan --out,
plan --compare-capacity, plan --check against the fake cloud). The run column is the infra
stage's GKE run (``entry.run_gke``, what ``tpurl run`` calls first on GKE) against the fake
cloud and fake-gcs-server: it is where the capacity mode decides what gets built; the watch per
mode is covered in tests/backends/gke/test_capacity_pools.py. A whole flow per mode (image
build, four stages) would cost minutes each for nothing the capacity mode changes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from flows.backends.gke.infra import clients
from flows.backends.gke.infra.infra_stage import run_gke
from flows.cli import main
from flows.config.capacity import CAPACITY_MODES, MAX_RUN_MODES
from tests.fakes.cloud import Cloud
from tests.support.logs import Log
from tests.support.profiles import (
    INFRA_OVERRIDES,
    TUTORIAL,
    capacity_overrides,
    capacity_profile,
    fake_hf_token,
)

# `plan --check` reads the bucket's results: on fake-gcs-server (conftest.py)
pytestmark = pytest.mark.usefixtures("bucket_reads_answer")

COMMANDS = ["validate", "plan", "plan --json", "plan --out", "plan --compare-capacity",
            "plan --check"]


class _NoBucket:
    def lookup_bucket(self, name: str) -> None:
        return None


def _argv(command: str, mode: str, tmp_path: Path, evaluates: bool = False,
          **more: str) -> list[str]:
    sets = {**INFRA_OVERRIDES, **capacity_overrides(mode),
            **({"eval.batches": "2"} if evaluates else {}), **more}
    argv = [*command.split(), *[f"--set={k}={v}" for k, v in sets.items()], TUTORIAL]
    if command == "plan --out":
        argv[1:2] = ["--out", str(tmp_path / "plan")]
    return argv


@pytest.mark.parametrize("evaluates", [False, True], ids=["five-stages", "with-eval"])
@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("mode", CAPACITY_MODES)
def test_no_command_crashes_in_any_capacity_mode(mode: str, command: str, evaluates: bool,
                                                 tmp_path: Path, cloud: Cloud,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    # the plan's measured estimate reads the bucket's results through the real client, on
    # fake-gcs-server (bucket_reads_answer): no bucket, so no result
    monkeypatch.setattr(clients, "default_clients", lambda s: (cloud.apis, _NoBucket()))
    monkeypatch.setenv("HF_TOKEN", fake_hf_token("capacitymatrix"))
    code = main(_argv(command, mode, tmp_path, evaluates))  # an exception here is the failure
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    if command == "plan --check":  # a failed check exits 1; the checks themselves ran
        assert code in (0, 1) and "pre-flight:" in out, out + err
        return
    assert code == 0, out + err
    if command == "plan --json":
        json.loads(out)
    if command == "plan --out":
        assert any((tmp_path / "plan").iterdir())
        shipped = list((tmp_path / "plan" / "manifests").glob("*-configmap-tpurl-programs-*"))
        assert len(shipped) == int(evaluates)  # the evaluation program, beside its JobSets
    if command in ("plan", "plan --compare-capacity"):
        assert f"capacity {mode}" in out
    if command == "plan":  # evaluate holds the slice in every mode: priced and bounded
        assert ("  evaluate " in out and "evaluate: gives up after" in out) is evaluates


@pytest.mark.parametrize("mode", CAPACITY_MODES)
def test_the_infra_run_succeeds_in_every_capacity_mode(mode: str, tmp_path: Path, cloud: Cloud,
                                                       gcs: Any,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(clients, "default_clients", lambda s: (cloud.apis, gcs))
    monkeypatch.setenv("TPURL_CACHE_DIR", str(tmp_path / "cache"))
    report = run_gke(capacity_profile(mode), Log())
    assert report.deployed
    [pool] = [p for p in cloud.state()["clusters"]["tpurl-v6e"]["nodePools"]
              if p["config"]["machineType"] == "ct6e-standard-4t"]
    assert ("autoscaling" in pool) is (mode != "reservation")


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("mode", CAPACITY_MODES)
def test_a_training_budget_past_the_flex_start_nodes_is_refused_by_every_command(
        mode: str, command: str, tmp_path: Path, cloud: Cloud, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """13 h of gke.train_run_budget_s on flex-start nodes that live 12 h (capacity_overrides):
    every command refuses the profile with the field and its fix before it reads anything;
    in the other modes the budget is the profile's to choose."""
    monkeypatch.setattr(clients, "default_clients", lambda s: (cloud.apis, _NoBucket()))
    monkeypatch.setenv("HF_TOKEN", "x")
    argv = _argv(command, mode, tmp_path)
    code = main([*argv[:-1], f"--set=gke.train_run_budget_s={13 * 3600}", argv[-1]])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    if mode not in MAX_RUN_MODES:
        assert code in ((0, 1) if command == "plan --check" else (0,)), out + err
        return
    assert code == 2, out + err
    assert "gke.train_run_budget_s: 46800 s (13 h) lets the training run longer" in err, err
    assert "fix: set gke.train_run_budget_s=43200" in err
    assert cloud.apis.calls == []  # refused before any cloud read


@pytest.mark.parametrize("mode", CAPACITY_MODES)
def test_a_reservation_any_vm_may_consume_fails_the_check_in_reservation_mode_only(
        mode: str, tmp_path: Path, cloud: Cloud, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A reservation made without --require-specific-reservation (Compute Engine's
    specificReservationRequired false, left out of the JSON) is one gke-node-pool does not
    count as found (cluster-toolkit modules/compute/gke-node-pool/reservation_definitions.tf,
    verified_specific_reservations), so its precondition would stop the deploy: pre-flight
    says so before. The modes that consume no reservation never look at it."""
    assert cloud.apis.reservation is not None
    cloud.apis.reservation.pop("specificReservationRequired")
    monkeypatch.setattr(clients, "default_clients", lambda s: (cloud.apis, _NoBucket()))
    monkeypatch.setenv("HF_TOKEN", fake_hf_token("capacitymatrix"))
    code = main(_argv("plan --check", mode, tmp_path))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    line = next(x for x in out.splitlines() if "] reservation:" in x)
    if mode != "reservation":
        assert line.startswith("[OK") and f"capacity {mode} consumes no reservation" in line
        return
    assert code == 1 and line.startswith("[FAIL   ]"), out
    assert "my-v6e-res is consumed automatically by any matching VM" in line
    assert "--require-specific-reservation" in out


@pytest.mark.parametrize("slices", [1, 2])
@pytest.mark.parametrize("mode", CAPACITY_MODES)
def test_the_pools_are_named_as_gke_node_pool_names_them(
        mode: str, slices: int, tmp_path: Path, cloud: Cloud, gcs: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """One slice: the module's name alone; several: "-<index>" appended (cluster-toolkit
    modules/compute/gke-node-pool/main.tf, google_container_node_pool.node_pool.name). The
    fake named a single slice's pool gke-tpu-v6e-pool-0, a pool GKE never has."""
    assert cloud.apis.reservation is not None
    cloud.apis.reservation["specificReservation"]["count"] = str(8 * slices)
    monkeypatch.setattr(clients, "default_clients", lambda s: (cloud.apis, gcs))
    monkeypatch.setenv("TPURL_CACHE_DIR", str(tmp_path / "cache"))
    assert run_gke(capacity_profile(mode, **{"gke.num_slices": str(slices)}), Log()).deployed
    names = [p["name"] for p in cloud.state()["clusters"]["tpurl-v6e"]["nodePools"]
             if p["config"]["machineType"] == "ct6e-standard-4t"]
    assert names == (["gke-tpu-v6e-pool"] if slices == 1 else
                     ["gke-tpu-v6e-pool-0", "gke-tpu-v6e-pool-1"])


def test_the_run_stops_at_pre_flight_before_gcluster_on_a_reservation_any_vm_may_consume(
        tmp_path: Path, cloud: Cloud, gcs: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """`tpurl run`'s infra stage on such a reservation: stopped by pre-flight, no
    `gcluster deploy` (whose gke-node-pool precondition would have failed minutes in)."""
    from flows.core.failures import StageFailed

    assert cloud.apis.reservation is not None
    cloud.apis.reservation["specificReservationRequired"] = False
    monkeypatch.setattr(clients, "default_clients", lambda s: (cloud.apis, gcs))
    monkeypatch.setenv("TPURL_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(StageFailed) as err:
        run_gke(capacity_profile("reservation"), Log())
    assert "pre-flight checks failed" in str(err.value)
    assert [c for c in cloud.calls("gcluster") if c[0] == "deploy"] == []


# A chain of modes and a list of zones. Every mode alone and two chains, over the
# region's three zones with gke.zone left out (it is then the first); every command.
THREE_ZONES = {"gke.zones": "us-east5-b,us-east5-a,us-east5-c", "gke.zone": ""}
CHAINS = [*CAPACITY_MODES, "flex-start,on-demand,spot", "reservation,queued,on-demand"]
# what every command refuses before it reads anything, with the field it names
REFUSED = [({"gke.zones": "us-east5-a,us-east5-b", "gke.zone": "us-east5-b"}, "gke.zone"),
           ({"gke.zones": "us-east5-b,us-central1-a"}, "gke.zones"),
           ({"gke.capacity": "on-demand,reservation"}, "gke.capacity")]


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("chain", CHAINS)
def test_no_command_crashes_for_any_chain_over_three_zones(
        chain: str, command: str, tmp_path: Path, cloud: Cloud,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(clients, "default_clients", lambda s: (cloud.apis, _NoBucket()))
    monkeypatch.setenv("HF_TOKEN", fake_hf_token("capacitymatrix"))
    code = main(_argv(command, chain, tmp_path, **THREE_ZONES))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    if command == "plan --check":
        assert code in (0, 1) and "pre-flight:" in out, out + err
        return
    assert code == 0, out + err
    if command in ("plan", "plan --compare-capacity"):
        assert f"capacity {chain.replace(',', ', ')}" in out, out
    if command == "plan --compare-capacity":
        for zone in THREE_ZONES["gke.zones"].split(","):
            assert zone in out, out


@pytest.mark.parametrize("command", [*COMMANDS, "run"])
@pytest.mark.parametrize(("sets", "field"), REFUSED)
def test_a_bad_chain_or_zone_list_is_refused_by_every_command_before_any_read(
        sets: dict[str, str], field: str, command: str, tmp_path: Path, cloud: Cloud,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(clients, "default_clients", lambda s: (cloud.apis, _NoBucket()))
    monkeypatch.setenv("HF_TOKEN", fake_hf_token("capacitymatrix"))
    code = main(_argv(command, "on-demand", tmp_path, **sets))
    out, err = capsys.readouterr()
    assert code == 2 and f"  - {field}: " in err, out + err
    assert "fix: " in err
    assert cloud.apis.calls == [] and cloud.calls("gcluster") == []
