"""TPU generations as data (flows/config/tpu.py): every generation × shipped GKE profile
(each file of deployments/profiles/ with backend gke) validates, plans and renders JobSets
that pass the JobSet CRD and Kubernetes' schemas with the generation's labels and Pathways
instance type; ``plan --compare-tpu`` on the tutorial."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest
import yaml

from flows.backends.gke.jobs.manifests import stage_run
from flows.backends.gke.jobs.render import render_jobset
from flows.cli import main
from flows.common.paths import PROFILES_DIR
from flows.config import ProfileError, load_profile
from flows.config.fit import HBM_BYTES_PER_CHIP
from flows.config.tpu import TPU_GENERATIONS, TPU_MACHINES, chips_in_topology
from flows.operations.plan import build_plan, planned_workloads
from tests.support.jobset_schema import KUBERNETES_VERSION, jobset_errors
from tests.support.profiles import TUTORIAL, TUTORIAL_REQUIRED, required_overrides

SMOKE = "smoke-qwen3-0.6b-v6e-8"
LLAMA = "llama3.1-8b-v6e-16"
# a slice of each generation that holds the tutorial's Qwen3-30B-A3B training
SLICES = {"v6e": ("ct6e-standard-4t", "4x8"), "v5p": ("ct5p-hightpu-4t", "2x4x4"),
          "tpu7x": ("tpu7x-standard-4t", "2x2x4")}
# the smoke profile's 0.6B model fits one host, and its gke.max_usd_per_run admits no more
SMOKE_SLICES = {"v6e": ("ct6e-standard-4t", "2x4"), "v5p": ("ct5p-hightpu-4t", "2x2x1"),
                "tpu7x": ("tpu7x-standard-4t", "2x2x1")}
# the unpriced generations need the profile's own price (a quote), as a team would give it
QUOTE = {"gke.prices.reservation.usd_per_chip_hour": "3.0",
         "gke.prices.reservation.source": "a quote", "gke.prices.reservation.as_of": "2026-12-01",
         "gke.prices.on-demand.usd_per_chip_hour": "3.0",
         "gke.prices.on-demand.source": "a quote", "gke.prices.on-demand.as_of": "2026-12-01"}
# every shipped GKE profile, so a new one is checked on every generation without a list here
GKE_PROFILES = sorted(p.stem for p in PROFILES_DIR.glob("*.yaml")
                      if yaml.safe_load(p.read_text()).get("backend") == "gke")


def _slice(profile: str, generation: str) -> tuple[str, str]:
    """The tutorial's and the smoke run's chosen slices; for the others, the profile's own
    slice on its generation, and elsewhere the one the tutorial uses there (all of them
    smaller models than its 30B)."""
    if profile == SMOKE:
        return SMOKE_SLICES[generation]
    raw = yaml.safe_load((PROFILES_DIR / f"{profile}.yaml").read_text())["gke"]
    if profile != TUTORIAL and TPU_MACHINES[raw["machine_type"]].generation == generation:
        return raw["machine_type"], raw["topology"]
    return SLICES[generation]


def _overrides(profile: str, generation: str) -> dict[str, str]:
    machine_type, topology = _slice(profile, generation)
    base = dict(TUTORIAL_REQUIRED)
    raw = yaml.safe_load((PROFILES_DIR / f"{profile}.yaml").read_text())["gke"]
    if raw.get("capacity", "reservation") != "reservation":
        base.pop("gke.reservation")
    moved = {} if (machine_type, topology) == (raw["machine_type"], raw["topology"]) else {
        "gke.machine_type": machine_type, "gke.topology": topology}
    if profile != TUTORIAL and moved:
        # the rollout's data parallelism follows the slice: -1 lets train_rl fill it in
        moved["train.args.rollout_data_parallelism"] = "-1"
    if profile not in (TUTORIAL, SMOKE) and moved:
        # the profile's spend cap is its own slice's; the quoted price moves the estimate
        moved["gke.max_usd_per_run"] = "100000"
    return {**base, **moved, **({} if generation == "v6e" else QUOTE)}


def test_the_fit_estimate_reads_the_generation_table() -> None:
    assert {name: g.hbm_bytes_per_chip
                                  for name, g in TPU_GENERATIONS.items()} == HBM_BYTES_PER_CHIP
    assert {m.generation for m in TPU_MACHINES.values()} == set(TPU_GENERATIONS)


def test_the_new_profiles_are_among_those_checked() -> None:
    assert {TUTORIAL, SMOKE, "llama3.1-8b-v6e-16", "gemma3-12b-v6e-16"} <= set(GKE_PROFILES)


@pytest.mark.parametrize("profile", GKE_PROFILES)
@pytest.mark.parametrize("generation", sorted(SLICES))
def test_every_generation_validates_plans_and_renders(profile: str, generation: str) -> None:
    loaded = load_profile(profile, _overrides(profile, generation), environ={})
    gke = loaded.gke
    assert gke is not None and gke.machine.generation == generation
    assert build_plan(loaded)
    facts = TPU_GENERATIONS[generation]
    for stage, workload in planned_workloads(loaded).items():
        jobset = render_jobset(workload, loaded, run=stage_run(loaded, stage), stage=stage)
        assert jobset_errors(jobset) == [], (generation, stage)
        text = repr(jobset)
        for rj in jobset["spec"]["replicatedJobs"]:
            job: dict[str, Any] = {"apiVersion": "batch/v1", "kind": "Job",
                                   "metadata": {"name": f"{jobset['metadata']['name']}-x-0"},
                                   "spec": rj["template"]["spec"]}
            kubernetes_validate.validate(job, KUBERNETES_VERSION, strict=True)
        if stage in ("train", "evaluate"):
            assert f"'cloud.google.com/gke-tpu-accelerator': '{facts.accelerator_label}'" in text
            assert f"--instance_type={facts.pathways_instance_prefix}:{gke.topology}" in text


def test_an_unpriced_generation_asks_the_profile_for_its_price() -> None:
    overrides = {k: v for k, v in _overrides(TUTORIAL, "v5p").items()
                 if not k.startswith("gke.prices")}
    with pytest.raises(ProfileError) as err:
        load_profile(TUTORIAL, overrides, environ={})
    said = str(err.value)
    assert "no price for capacity 'reservation'" in said
    assert "Google publishes no TPU v5p list price" in said and "searched 2026-12-06" in said


def test_a_priced_generation_without_a_mode_price_says_only_the_field() -> None:
    from flows.config.capacity import unpriced_problem
    assert unpriced_problem("spot", "v6e") == "no price for capacity 'spot' in gke.prices"
    assert "TPU tpu7x" in unpriced_problem("on-demand", "tpu7x")


def test_v6e_keeps_its_cited_prices() -> None:
    loaded = load_profile(TUTORIAL, dict(TUTORIAL_REQUIRED), environ={})
    assert loaded.gke is not None and loaded.gke.usd_per_chip_hour == 2.70


def test_compare_tpu_on_the_tutorial(capsys: pytest.CaptureFixture[str]) -> None:
    args = [f"--set={k}={v}" for k, v in TUTORIAL_REQUIRED.items()]
    assert main(["plan", TUTORIAL, *args, "--compare-tpu"]) == 0
    out = capsys.readouterr().out
    part = out[out.index("TPU generations for qwen3-30b-a3b"):]
    # the profile's own slice: 32 v6e chips at the cited $2.70, 4 h as the profile says
    # and its own rollout settings, which hold the model there
    assert ("ct6e-standard-4t 4x8: 32 chips, ≈ 4.0 h training; rollout as set (tensor 1 × "
            "data 4 × expert 4); reservation $86.40/h ≈ $345.60/run") in part
    # v5p 32 chips: half v6e's peak per chip, so twice the hours; no cited price
    assert ("ct5p-hightpu-4t 2x4x4: 32 chips, ≈ 8.0 h training; rollout as set (tensor 1 × "
            "data 4 × expert 4); reservation price unknown") in part
    # tpu7x 16 chips: 32 × 918 / (16 × 2307) × 4 h
    assert f"tpu7x-standard-4t 2x2x4: 16 chips, ≈ {4 * 32 * 918 / (16 * 2307):.1f} h" in part
    assert "on-demand price unknown" in part and "(as of 2024-12-11)" in part
    # smaller slices the estimate refuses are not offered
    assert "ct6e-standard-4t 4x4:" not in part and chips_in_topology("4x4") == 16


def test_compare_tpu_derives_a_rollout_where_the_profiles_split_does_not_resolve(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The Llama profile's tensor 2 × data 4 is written for its 8 sampler devices: on a slice
    of another size it resolves to nothing, and the comparison derives a split for that
    slice rather than leaving the reader without one."""
    args = [f"--set={k}={v}" for k, v in required_overrides(LLAMA).items()]
    assert main(["plan", LLAMA, *args, "--compare-tpu"]) == 0
    out = capsys.readouterr().out
    part = out[out.index("TPU generations for llama3.1-8b"):]
    # one VM of 4 chips: the trainer shares them, and a replica of tensor 4 holds the model
    assert ("ct6e-standard-4t 2x2: 4 chips (tight: activations may not fit), ≈ 8.0 h "
            "training; rollout needs tensor 4 × data 1") in part
    assert "tpu7x-standard-4t 2x2x2: 8 chips, ≈ 1.6 h training; rollout as set (tensor 2" in part
    assert "ct5p-hightpu-4t 2x2x2: 8 chips, ≈ 8.0 h training; rollout needs tensor" in part
    assert "none derived" not in part and "no tensor × data × expert split" not in part


@pytest.mark.parametrize(("profile", "generation", "status"),
                         [(TUTORIAL, "v6e", None), (TUTORIAL, "v5p", "warn"),
                          (SMOKE, "tpu7x", "ok"), (TUTORIAL, "tpu7x", "ok")])
def test_preflight_says_whether_the_blueprint_builds_the_generations_pool(
        profile: str, generation: str, status: str | None) -> None:
    """The blueprint copies Cluster Toolkit's v6e example (tpu_topology); a multi-host
    Ironwood pool gets the workload policy its edits add instead (flows/backends/gke/infra/
    preflight/generation.py), and the line says so."""
    from flows.backends.gke.infra.preflight.generation import check_generation
    from flows.backends.gke.infra.settings import settings_from_profile

    found = check_generation(settings_from_profile(load_profile(
        profile, _overrides(profile, generation), environ={})))
    assert (found.status if found else None) == status
    if generation == "tpu7x" and profile == TUTORIAL:
        assert found is not None and "HIGH_THROUGHPUT workload policy" in found.issue.problem


@pytest.mark.parametrize("generation", sorted(SLICES))
def test_kueue_flavors_and_quota_follow_the_generation(generation: str) -> None:
    """The TPU flavors' node labels (what Kueue admits the pods onto) and the quota metric
    family pre-flight looks for are the generation's, from the table."""
    from flows.backends.gke.infra.kueue_config import planned_kueue
    from flows.backends.gke.infra.preflight.capacity import _quota_family
    from flows.backends.gke.infra.settings import settings_from_profile

    s = settings_from_profile(load_profile(TUTORIAL, _overrides(TUTORIAL, generation),
                                           environ={}))
    facts = TPU_GENERATIONS[generation]
    kueue = planned_kueue(s)
    tpu = {name: f for name, f in kueue["flavors"].items() if name != "cpu-np-flavor"}
    assert list(tpu) == [f"{facts.flavor_prefix}-flavor"]  # the tutorial's reservation
    assert tpu[f"{facts.flavor_prefix}-flavor"]["spec"]["nodeLabels"][
        "cloud.google.com/gke-tpu-accelerator"] == facts.accelerator_label
    queued = [f["name"] for g in kueue["cluster_queue"]["spec"]["resourceGroups"]
              for f in g["flavors"]]
    assert f"{facts.flavor_prefix}-flavor" in queued
    assert _quota_family(s) == facts.quota_family


def test_a_left_pool_of_an_unpriced_generation_is_not_priced_at_v6e_rates() -> None:
    from flows.config.capacity import ModePrice, price_for

    quote = ModePrice(usd_per_chip_hour=4.0, source="a quote", as_of="2026-12-01")
    price, said = price_for({"reservation": quote}, "spot")
    assert price == quote and said.startswith("reservation price")


@pytest.mark.parametrize("machine_type", ["ct5lp-hightpu-1t", "ct5lp-hightpu-4t",
                                          "ct5lp-hightpu-8t"])
def test_v5e_is_refused_as_the_pinned_maxtexts_and_the_fix_names_what_is_listed(
        machine_type: str) -> None:
    """A v5e machine type is refused saying why (MaxText 0.2.4 ships no GRPO launch on
    Pathways for it), and the fix's machine types load."""
    with pytest.raises(ProfileError) as refused:
        load_profile(TUTORIAL, {**TUTORIAL_REQUIRED, "gke.machine_type": machine_type},
                     environ={})
    issue = next(i for i in refused.value.issues if i.field == "gke.machine_type")
    assert issue.problem.startswith(f"TPU v5e ({machine_type}) is not supported: MaxText "
                                    "0.2.4, the pinned release, ships GRPO launches on "
                                    "Pathways for v6e, v5p and tpu7x only")
    assert issue.fix == f"use one of {', '.join(sorted(TPU_MACHINES))}"
    assert "ct6e-standard-4t" in issue.fix
    load_profile(TUTORIAL, {**TUTORIAL_REQUIRED, "gke.machine_type": "ct6e-standard-4t"},
                 environ={})
