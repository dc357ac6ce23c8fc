"""Plans are pure and carry the tutorial's commands, never a secret."""

from __future__ import annotations

import json

import pytest

from flows.cli import main
from flows.common.paths import REPO_ROOT
from flows.config import load_profile
from flows.operations.plan import build_plan
from tests.support.profiles import TUTORIAL, fake_hf_token


def test_tutorial_plan_has_the_tutorials_programs_and_flags(tutorial_overrides, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", fake_hf_token("canaryplan"))
    plans = {p.stage: p for p in build_plan(load_profile(TUTORIAL, tutorial_overrides, {}))}
    assert list(plans) == ["image", "infra", "convert", "train", "export"]
    convert = plans["convert"].workloads[0].command
    assert "python3 -m maxtext.checkpoint_conversion.to_maxtext model_name=qwen3-30b-a3b" in convert
    assert "--hf_model_path=Qwen/Qwen3-30B-A3B-Instruct-2507" in convert
    assert "--lazy_load_tensors=True" in convert and "hardware=cpu" in convert
    train = plans["train"].workloads[0]
    assert "maxtext.trainers.post_train.rl.train_rl" in train.command
    assert "rl.num_generations=4" in train.command and "learning_rate=2e-5" in train.command
    assert "echo 190G > /sys/fs/cgroup/memory.max" not in train.command  # a limit instead
    assert train.env == {"JAX_PLATFORMS": "proxy,cpu", "ENABLE_PATHWAYS_PERSISTENCE": "1",
                         "SKIP_JAX_PRECOMPILE": "1"}  # as MaxText's RL scripts set it
    assert train.secret_env == {"HF_TOKEN": "env:HF_TOKEN"}
    assert train.placement == "pathways ct6e-standard-4t 4x8 x1"
    export = plans["export"].workloads[0].command
    assert "--override_model_architecture" in export and "weight_dtype=bfloat16" in export
    assert plans["train"].estimated_chip_hours == 32 * 4.0
    dumped = json.dumps([p.model_dump() for p in plans.values()])
    assert "hf_access_token" not in dumped and "canary" not in dumped


def test_output_uris_change_with_training_config_only_downstream(tutorial_overrides):
    base = {p.stage: p for p in build_plan(load_profile(TUTORIAL, tutorial_overrides, {}))}
    lr = {**tutorial_overrides, "train.args.learning_rate": "1e-5"}
    changed = {p.stage: p for p in build_plan(load_profile(TUTORIAL, lr, {}))}
    assert changed["convert"].outputs == base["convert"].outputs
    assert changed["train"].outputs != base["train"].outputs
    assert changed["export"].outputs != base["export"].outputs
    model = {**tutorial_overrides, "model.hf_revision": "abc123"}
    moved = {p.stage: p for p in build_plan(load_profile(TUTORIAL, model, {}))}
    assert moved["convert"].outputs != base["convert"].outputs


def test_cli_plan_writes_files(tmp_path, tutorial_overrides, capsys):
    args = [f"--set={k}={v}" for k, v in tutorial_overrides.items()]
    assert main(["plan", TUTORIAL, *args, "--out", str(tmp_path)]) == 0
    names = sorted(p.name for p in tmp_path.iterdir())
    assert "4-train.json" in names and "4-train-train-grpo.sh" in names and "plan.txt" in names
    assert "$86.40/h" in capsys.readouterr().out
    manifests = sorted(p.name for p in (tmp_path / "manifests").iterdir())
    assert len(manifests) == 4 and manifests[0].startswith("01-secret")
    assert any("jobset-train" in name for name in manifests)


def test_a_rehearsal_plan_writes_its_programs_and_its_check_reaches_nothing(tmp_path, capsys):
    """The local profile's plan files are the stages' JSON and scripts, with no manifest (no
    cluster); --check has nothing to ask of a cloud and says so, after the plan."""
    out = tmp_path / "plan"
    assert main(["plan", "rehearsal", "--out", str(out), "--check"]) == 0
    said = capsys.readouterr().out
    assert "pre-flight: nothing to check for a local profile" in said
    names = sorted(p.name for p in out.iterdir())
    assert "plan.txt" in names and any(n.endswith("-train.json") for n in names)
    assert not (out / "manifests").exists()


def test_profiles_lists_the_shipped_profiles_and_the_fields_a_run_may_set(capsys):
    from flows.config.profile_file import profile_names
    from flows.config.run_overrides import tunable_fields

    assert main(["profiles"]) == 0
    assert capsys.readouterr().out.split() == profile_names()
    assert "rehearsal" in profile_names() and TUTORIAL in profile_names()
    assert main(["profiles", "--tunable"]) == 0
    assert capsys.readouterr().out.split() == list(tunable_fields()) != []


def test_cli_validate_exit_codes(capsys):
    assert main(["validate", "rehearsal"]) == 0
    assert main(["validate", TUTORIAL]) == 2
    err = capsys.readouterr().err
    assert "gke.project: is required but not set" in err


@pytest.mark.parametrize("source", ["env", "secret_block", "gcp_secret"])
def test_cli_plan_out_holds_no_token_whatever_its_source(tmp_path, tutorial_overrides, capsys,
                                                         monkeypatch, source):
    """`tpurl plan --out` with the token set where the profile points (an environment
    variable; for a block or Secret Manager, the value is never read by a plan): no file,
    and nothing printed, holds it or its base64 (only the Secret's placeholder is written)."""
    import base64

    token = fake_hf_token("PlanOut" + source)
    monkeypatch.setenv("HF_TOKEN", token)
    ref = {"env": "HF_TOKEN", "secret_block": "hf-token", "gcp_secret": "hf-token"}[source]
    shipped = REPO_ROOT / "deployments" / "profiles" / f"{TUTORIAL}.yaml"
    written = shipped.read_text().replace("hf_token: {env: HF_TOKEN}", f"hf_token: {{{source}: {ref}}}")
    assert f"{{{source}: {ref}}}" in written
    profile = tmp_path / f"{TUTORIAL}.yaml"
    profile.write_text(written)
    args = [f"--set={k}={v}" for k, v in tutorial_overrides.items()]
    out = tmp_path / "out"
    assert main(["plan", str(profile), *args, "--out", str(out)]) == 0
    texts = {str(p): p.read_text() for p in out.rglob("*") if p.is_file()}
    texts["printed"] = "".join(capsys.readouterr())
    encoded = base64.b64encode(token.encode()).decode()
    assert [w for w, t in texts.items() if token in t or encoded in t] == []
    secret = next(t for w, t in texts.items() if "01-secret" in w)
    assert "secretKeyRef" in "".join(texts.values())
    assert "kind: Secret" in secret and "\ndata:" not in secret and "stringData" not in secret


@pytest.mark.parametrize("name", ["smoke-qwen3-0.6b-v6e-8", TUTORIAL])
def test_a_gke_plan_says_what_one_preemption_costs_and_whether_the_cap_leaves_room(
        name, tutorial_overrides, capsys, monkeypatch):
    """The smoke profile's cap ($14.50 over an $11.88 estimate) leaves no room for one
    preemption: the plan says so before the run, where the cap would otherwise stop a run
    that could have recovered."""
    from flows.operations.preemption_cost import cost_lines, preemption_cost

    monkeypatch.setenv("HF_TOKEN", fake_hf_token("plan"))
    fields = {k: v for k, v in tutorial_overrides.items()
              if name == TUTORIAL or k != "gke.reservation"}
    assert main(["plan", name, *[f"--set={k}={v}" for k, v in fields.items()]]) == 0
    out = capsys.readouterr().out
    expected = cost_lines(preemption_cost(load_profile(name, fields, environ={})))
    assert "One preemption of training" in out
    assert all(f"  {line}" in out.splitlines() for line in expected), (expected, out[-1500:])
    if name != TUTORIAL:
        assert "not enough for one preemption (the cap stops the run)" in out
