"""The TPU pool's shape per capacity mode, before and after ``gcluster deploy``.

Before: the edited blueprint, as gcluster will expand it (a TPU pool without a
static_node_count key gets one: cluster-toolkit pkg/config/hardware.go), must give the mode's
pool, or the deploy is refused naming the setting and the fix. After: a TPU pool of the wrong
shape fails the stage with what it bills per hour and the command that removes it. The fake
gcluster builds the pool the way gcluster and gke-node-pool would
(tests/fakes/cloud/gcluster_expand.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from flows.backends.gke.infra import blueprint, cluster
from flows.backends.gke.infra.blueprint import edit_blueprint, edit_context, load_edits
from flows.backends.gke.infra.commands import blueprint_vars
from flows.backends.gke.infra.pool_shape import pool_shape_problems
from flows.backends.gke.infra.provision import provision
from flows.backends.gke.infra.settings import settings_from_profile
from flows.core.failures import StageFailed
from tests.fakes.cloud import BLUEPRINT_FIXTURE, Cloud
from tests.support.logs import Log
from tests.support.profiles import capacity_profile as mode_profile

MODES = ["reservation", "on-demand", "spot", "flex-start"]


def _problems(mode: str, drop: tuple[str, ...] = ()) -> list[tuple[str, str, str]]:
    profile = mode_profile(mode)
    assert profile.gke is not None
    edits = [e for e in load_edits() if e.id not in drop]
    text = edit_blueprint(BLUEPRINT_FIXTURE.read_text(), edit_context(profile.gke), edits)
    return pool_shape_problems(text, profile.gke, blueprint_vars(settings_from_profile(profile)))


@pytest.mark.parametrize("mode", MODES)
def test_the_shipped_edits_give_every_mode_its_pool(mode: str) -> None:
    assert _problems(mode) == []


@pytest.mark.parametrize("mode", ["on-demand", "spot"])
def test_a_pool_gcluster_would_make_static_is_refused_with_the_setting_and_fix(mode: str
                                                                               ) -> None:
    """What main did: the example has no static_node_count, the edit removed nothing, and
    gcluster's expansion fills in 8 (4x8 chips / 4 per host)."""
    [(setting, problem, fix)] = _problems(mode, drop=("capacity-not-static",))
    assert setting == "gke-tpu-v6e-pool.static_node_count"
    assert "gcluster fills static_node_count in" in problem and "8 nodes" in problem
    assert "set static_node_count: null (edit capacity-not-static)" in fix


def test_flex_start_is_not_expanded_static_but_still_needs_its_flags() -> None:
    """hardware.go skips a pool with enable_flex_start: true, so no static count appears."""
    problems = _problems("flex-start", drop=("capacity-not-static",
                                             "capacity-flex-start-no-auto-repair"))
    assert [p[0] for p in problems] == ["gke-tpu-v6e-pool.auto_repair"]


def test_every_invariant_is_reported_in_one_round() -> None:
    problems = _problems("spot", drop=("capacity-no-reservation", "capacity-spot",
                                       "capacity-scale-from-zero"))
    assert [p[0] for p in problems] == ["gke-tpu-v6e-pool.autoscaling_min_node_count",
                                        "gke-tpu-v6e-pool.reservation_affinity",
                                        "gke-tpu-v6e-pool.spot"]


def _on_demand(tmp_path: Path):
    return settings_from_profile(mode_profile("on-demand"), cache_dir=tmp_path / "cache")


def test_on_demand_deploys_an_autoscaled_pool(tmp_path: Path, cloud: Cloud, gcs: Any) -> None:
    s = _on_demand(tmp_path)
    report = provision(s, cloud.apis, gcs, Log())
    assert report.deployed
    [tpu] = [p for p in cloud.state()["clusters"]["tpurl-v6e"]["nodePools"]
             if p["config"]["machineType"] == "ct6e-standard-4t"]
    assert "initialNodeCount" not in tpu
    assert tpu["autoscaling"]["minNodeCount"] == 0 and tpu["autoscaling"]["maxNodeCount"] == 8


def test_a_wrong_blueprint_is_refused_before_gcluster_runs(tmp_path: Path, cloud: Cloud,
                                                           gcs: Any,
                                                           monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    edits = [e for e in load_edits() if e.id != "capacity-not-static"]
    monkeypatch.setattr(blueprint, "load_edits", lambda: edits)
    with pytest.raises(StageFailed) as err:
        provision(_on_demand(tmp_path), cloud.apis, gcs, Log())
    assert "nothing was deployed" in str(err.value)
    assert "gke-tpu-v6e-pool.static_node_count" in err.value.diagnosis.detail
    assert "edit capacity-not-static" in err.value.diagnosis.fix
    assert [c for c in cloud.calls("gcluster") if c[0] == "deploy"] == []
    assert "tpurl-v6e" not in cloud.state()["clusters"]


def test_a_static_pool_after_deploy_fails_with_its_price_and_removal(
        tmp_path: Path, cloud: Cloud, gcs: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Defence in depth: were the blueprint check missing, the live pool check names what
    the wrong pool bills and how to remove it."""
    edits = [e for e in load_edits() if e.id != "capacity-not-static"]
    monkeypatch.setattr(blueprint, "load_edits", lambda: edits)
    monkeypatch.setattr(cluster, "refuse_wrong_pool_shape", lambda s, text: None)
    with pytest.raises(StageFailed) as err:
        provision(_on_demand(tmp_path), cloud.apis, gcs, Log())
    assert "does not scale from zero" in err.value.diagnosis.detail
    assert ("pool gke-tpu-v6e-pool bills 8 nodes x 4 chips = 32 chips at $2.70/chip-h = "
            "$86.40/h") in err.value.diagnosis.detail
    assert ("gcloud container node-pools delete gke-tpu-v6e-pool --cluster=tpurl-v6e "
            "--location=us-east5 --project=my-proj-123 --quiet") in err.value.diagnosis.fix


@pytest.mark.parametrize(("dropped", "setting"), [
    ("capacity-scale-to-one-slice", "autoscaling_max_node_count"),
    ("capacity-flex-start-max-run", "max_run_duration"),
    ("capacity-flex-start", "enable_flex_start")])
def test_each_missing_edit_is_named_by_its_setting_and_edit(dropped: str, setting: str) -> None:
    mode = "on-demand" if "slice" in dropped else "flex-start"
    problems = _problems(mode, drop=(dropped,))
    assert [p[0] for p in problems] == [f"gke-tpu-v6e-pool.{setting}"]
    assert dropped in problems[0][2]
