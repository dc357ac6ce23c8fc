"""Cost figures and the plan text of the infra stage (pure)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from flows.backends.gke.infra.cost import (
    cost_plan,
    held_chip_hours,
    pool_chip_hours_since,
    stage_estimated_chip_hours,
    stage_held_chip_hours,
)
from flows.backends.gke.infra.infra_stage import gke_plan_actions, gke_plan_notes
from tests.support.profiles import INFRA_OVERRIDES, infra_profile


def test_tutorial_cost_plan() -> None:
    plan = cost_plan(infra_profile())
    assert plan.pool_chips == 32 and plan.usd_per_chip_hour == 2.70
    assert plan.idle_usd_per_hour == pytest.approx(86.40)
    by = {s.stage: s for s in plan.stages}
    assert by["train"].busy_chip_hours == 128.0 and by["train"].usd == pytest.approx(345.60)
    assert by["convert"].busy_chip_hours == 0.0  # on the CPU pool…
    assert by["convert"].held_chip_hours == 16.0  # …while the static TPU pool is billed
    assert plan.usd == pytest.approx(432.00)
    assert stage_estimated_chip_hours(infra_profile(), "train") == 128.0
    assert stage_estimated_chip_hours(infra_profile(), "image") == 0.0


def test_price_table_and_held_hours() -> None:
    from flows.config import ProfileError, load_profile

    assert infra_profile().gke.usd_per_chip_hour == 2.70
    cud = load_profile("qwen3-30b-a3b-v6e-32", {
        **INFRA_OVERRIDES, "gke.prices.reservation.usd_per_chip_hour": "1.89",
        "gke.prices.reservation.source": "our 1-year commitment", "gke.prices.reservation.as_of":
        "2026-11-01"}, {})
    assert cud.gke.usd_per_chip_hour == 1.89 and cost_plan(cud).usd_per_chip_hour == 1.89
    with pytest.raises(ProfileError, match=r"no price for capacity 'spot'"):
        load_profile("qwen3-30b-a3b-v6e-32", {**INFRA_OVERRIDES, "gke.capacity": "spot",
                                              "gke.reservation": ""}, {})
    assert held_chip_hours(32, 1800) == 16.0
    assert stage_held_chip_hours(infra_profile(), 3600) == 32.0
    assert stage_held_chip_hours(infra_profile(), 3600, pool_exists=False) == 0.0
    now = datetime(2025, 1, 1, 12, tzinfo=UTC)
    assert pool_chip_hours_since((now - timedelta(hours=2)).isoformat(), now, 32) == 64.0


def test_plan_lists_exact_commands_with_the_cidr() -> None:
    actions = gke_plan_actions(infra_profile())
    assert any("gcluster deploy gke-tpu-v6e-advanced.yaml --vars" in a
               and "--auto-approve -w" in a for a in actions)
    notes = gke_plan_notes(infra_profile())
    assert any("authorized_cidr=203.0.113.0/24" in a for a in actions)
    assert any("idle pool: $86.40 per hour" in n for n in notes)


def test_stage_entry_points_verify_against_the_fake_cloud(settings, cloud, gcs, monkeypatch
                                                          ) -> None:
    from flows.backends.gke.infra import clients
    from flows.backends.gke.infra.infra_stage import gke_outputs_present, verify_gke
    from flows.backends.gke.infra.provision import provision
    from tests.support.logs import Log

    monkeypatch.setenv("TPURL_CACHE_DIR", str(settings.cache_dir))
    monkeypatch.setattr(clients, "default_clients", lambda s: (cloud.apis, gcs))
    monkeypatch.setattr("flows.backends.gke.infra.infra_stage.settings_from_profile",
                        lambda p, **kw: settings)
    assert not gke_outputs_present(infra_profile())
    provision(settings, cloud.apis, gcs, Log())
    assert gke_outputs_present(infra_profile())
    uris, details = verify_gke(infra_profile())
    assert uris["root"] == "gs://my-tpurl-bucket" and details["pool_chips"] == 32


def _spot_priced(**extra: str):
    from flows.config import load_profile

    return load_profile("qwen3-30b-a3b-v6e-32", {
        **INFRA_OVERRIDES, "gke.prices.spot.usd_per_chip_hour": "1.00",
        "gke.prices.spot.source": "a quote", "gke.prices.spot.as_of": "2026-12-01", **extra}, {})


def test_a_pool_that_scales_from_zero_holds_only_the_training_chips() -> None:
    static = cost_plan(infra_profile())
    spot = cost_plan(_spot_priced(**{"gke.capacity": "spot", "gke.reservation": ""}))
    # train 4 h x 32 chips, then at most 20 min the autoscaler keeps the unneeded nodes
    # (unneeded time, delay after the last scale-up); convert and export run on the CPU pool
    tail = 32 * 20 / 60
    assert spot.held_chip_hours == pytest.approx(128.0 + tail)
    assert spot.usd == pytest.approx(128.0 + tail) and spot.stages[1].tail_chip_hours == tail
    assert static.held_chip_hours == 5.0 * 32 and static.usd == 5.0 * 32 * 2.70
    assert spot.idle_chip_hours() == 0.0 and spot.idle_usd_per_hour == 0.0
    assert static.idle_chip_hours() == 32 * (168 - 5.0)
    assert stage_held_chip_hours(_spot_priced(**{"gke.capacity": "spot",
                                                 "gke.reservation": ""}), 3600,
                                 stage="convert") == 0.0


def test_plan_compares_every_mode_with_its_price_source() -> None:
    from flows.backends.gke.infra.cost import compare_capacity

    lines = compare_capacity(_spot_priced())
    end = next(i for i, line in enumerate(lines) if line.startswith("  (*"))
    table = {line.split()[0].lstrip("*"): line for line in lines[2:end]}
    assert set(table) == {"reservation", "flex-start", "spot", "on-demand", "queued"}
    assert lines[end + 1].startswith("Fallback chain, capacity reservation over zone(s) "
                                     "us-east5-b")
    assert lines[2].startswith(" *reservation")  # the profile's own mode is marked
    assert "cloud.google.com/tpu/pricing" in table["reservation"]
    assert "a quote, as of 2026-12-01" in table["spot"]
    assert "no price: add gke.prices.flex-start" in table["flex-start"]
    # weekly: static pool 168 h x 32 chips at 2.70; spot (4 h + the scale-down tail's
    # 20 min bound) x 32 chips at 1.00
    assert f"{168 * 32 * 2.70:10,.2f}" in table["reservation"]
    assert f"{128.0 + 32 / 3:10,.2f}" in table["spot"]
