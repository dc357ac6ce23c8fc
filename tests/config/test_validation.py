"""Every invalid profile is rejected before any stage runs, with its own field and fix."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from flows.config import ProfileError, load_profile
from tests.support.profiles import TUTORIAL, TUTORIAL_REQUIRED, fake_hf_token

# (case id, overrides on top of a valid tutorial profile, field named, words in the message)
INVALID = [
    ("cluster-too-long", {"gke.cluster": "a-cluster-name-far-too-long"}, "gke.cluster",
     "at most 20"),
    ("cluster-uppercase", {"gke.cluster": "Tpurl_V6e"}, "gke.cluster", "lowercase"),
    ("cluster-trailing-hyphen", {"gke.cluster": "tpurl-"}, "gke.cluster", "end with"),
    ("bucket-uppercase", {"gke.bucket": "My_Bucket"}, "gke.bucket", "bucket name"),
    ("bucket-uri", {"gke.bucket": "gs://my-bucket"}, "gke.bucket", "without gs://"),
    ("bucket-google", {"gke.bucket": "my-google-bucket"}, "gke.bucket", "google"),
    ("bucket-ip", {"gke.bucket": "192.168.1.1"}, "gke.bucket", "IP address"),
    ("bucket-short", {"gke.bucket": "ab"}, "gke.bucket", "3 to 63"),
    ("project-id", {"gke.project": "My Project"}, "gke.project", "project ID"),
    ("zone-not-in-region", {"gke.zone": "us-central1-b"}, "gke.zone", "not in region"),
    ("topology-malformed", {"gke.topology": "4-8"}, "gke.topology", "like '4x8'"),
    ("topology-unsupported", {"gke.topology": "3x5"}, "gke.topology", "supports"),
    ("machine-unknown", {"gke.machine_type": "ct9z-standard-4t"}, "gke.machine_type",
     "unknown TPU machine"),
    ("machine-v5e", {"gke.machine_type": "ct5lp-hightpu-4t"}, "gke.machine_type",
     "MaxText 0.2.4, the pinned release, ships GRPO launches"),
    ("slices-zero", {"gke.num_slices": "0"}, "gke.num_slices", "greater than or equal to 1"),
    ("toolkit-version", {"gke.cluster_toolkit_version": "1.103"}, "gke.cluster_toolkit_version",
     "release tag"),
    ("token-literal", {"model.hf_token": fake_hf_token("literal")},
     "model.hf_token", "revoke"),
    ("token-env-name", {"model.hf_token.env": "HF-TOKEN"}, "model.hf_token",
     "environment variable"),
    ("token-in-args", {"train.args.hf_access_token": "x"}, "train.args.hf_access_token",
     "set by the pipeline"),
    ("secret-in-other-arg", {"train.args.note": fake_hf_token("literal")},
     "train.args.note", "looks like a Hugging Face token"),
    ("reserved-path", {"train.args.load_parameters_path": "gs://x/y"},
     "train.args.load_parameters_path", "set by the pipeline"),
    ("unknown-top-key", {"trian.args.learning_rate": "1"}, "trian", "did you mean 'train'"),
    ("unknown-nested-key", {"gke.topolgy": "4x8"}, "gke.topolgy", "did you mean 'topology'"),
    ("generations-one", {"train.args.rl.num_generations": "1"}, "train.args.rl.num_generations",
     "at least 2"),
    ("learning-rate-zero", {"train.args.learning_rate": "0"}, "train.args.learning_rate",
     "positive"),
    ("learning-rate-text", {"train.args.learning_rate": "fast"}, "train.args.learning_rate",
     "not a number"),
    ("ici-mismatch", {"train.args.ici_fsdp_parallelism": "3"}, "train.args.ici_*_parallelism",
     "16 trainer devices per slice"),
    ("ici-two-wildcards", {"train.args.ici_tensor_parallelism": "-1"},
     "train.args.ici_*_parallelism", "more than one axis"),
    ("rollout-not-dividing", {"train.args.rollout_expert_parallelism": "3"},
     "train.args.rollout_*_parallelism", "does not divide"),
    ("target-shorter-than-prompt", {"train.args.max_target_length": "128"},
     "train.args.max_target_length", "no room"),
    ("unpinned-image", {"image.base": "us-docker.pkg.dev/x/y/tpu_post_training"}, "image.base",
     "no tag or digest"),
    ("disabled-unknown-patch", {"image.disabled_patches.no-such-patch": "because it is old"},
     "image.disabled_patches.no-such-patch", "names no declared patch"),
    ("disabled-without-reason", {"image.disabled_patches.maxtext-adafactor": "x"},
     "image.disabled_patches", "without a reason"),
    ("backend-unknown", {"backend": "slurm"}, "backend", "'gke' or 'local'"),
    ("queue-name", {"gke.kueue_queue": "User Queue"}, "gke.kueue_queue", "Kueue LocalQueue"),
    ("cidr", {"gke.authorized_cidr": "everyone"}, "gke.authorized_cidr", "not a CIDR"),
    ("price-tier-retired", {"gke.price_tier": "spot"}, "gke.price_tier", "gke.capacity"),
    ("price-table-retired", {"gke.price_table.spot": "1.0"}, "gke.price_table", "gke.prices"),
    # capacity modes (flows/config/capacity.py; Cluster Toolkit gke-node-pool preconditions)
    ("capacity-unknown", {"gke.capacity": "preemptible"}, "gke.capacity", "reservation"),
    ("spot-with-reservation", {"gke.capacity": "spot",
                               "gke.prices.spot.usd_per_chip_hour": "1.0",
                               "gke.prices.spot.source": "quote",
                               "gke.prices.spot.as_of": "2026-12-01"}, "gke.reservation",
     "consumes no reservation"),
    ("spot-without-price", {"gke.capacity": "spot", "gke.reservation": ""}, "gke.prices",
     "no price for capacity 'spot'"),
    ("flex-start-without-max-run", {"gke.capacity": "flex-start", "gke.reservation": "",
                                    "gke.prices.flex-start.usd_per_chip_hour": "1.5",
                                    "gke.prices.flex-start.source": "quote",
                                    "gke.prices.flex-start.as_of": "2026-12-01"},
     "gke.max_run_hours", "maximum run duration"),
    ("flex-start-beyond-seven-days", {"gke.capacity": "flex-start", "gke.reservation": "",
                                      "gke.max_run_hours": "200",
                                      "gke.prices.flex-start.usd_per_chip_hour": "1.5",
                                      "gke.prices.flex-start.source": "quote",
                                      "gke.prices.flex-start.as_of": "2026-12-01"},
     "gke.max_run_hours", "seven days"),
    ("flex-start-shorter-than-training", {"gke.capacity": "flex-start", "gke.reservation": "",
                                          "gke.max_run_hours": "2",
                                          "gke.prices.flex-start.usd_per_chip_hour": "1.5",
                                          "gke.prices.flex-start.source": "quote",
                                          "gke.prices.flex-start.as_of": "2026-12-01"},
     "gke.max_run_hours", "shorter than the estimated training"),
    ("cpu-work-on-tpu-from-zero", {"gke.capacity": "on-demand", "gke.reservation": "",
                                   "gke.conversion_placement": "tpu-hosts"},
     "gke.conversion_placement", "CPU job"),
    ("max-run-off-flex", {"gke.max_run_hours": "10"}, "gke.max_run_hours", "flex-start and queued only"),
    ("price-without-source", {"gke.prices.on-demand.usd_per_chip_hour": "2.7",
                              "gke.prices.on-demand.source": " ",
                              "gke.prices.on-demand.as_of": "2026-12-01"},
     "gke.prices.on-demand.source", "needs its source"),
    ("pathways-latest", {"gke.pathways_tag": "latest"}, "gke.pathways_tag", "pinned"),
    # one slice count: the retired second one is refused, naming the one that stays
    ("nodepool-count-retired", {"gke.nodepool_count": "1"}, "gke.nodepool_count",
     "gke.num_slices"),
    # MaxText 0.2.4 / tunix 0.1.7 start-up rules (flows/config/maxtext_rules.py)
    ("micro-batch-not-dividing", {"train.args.train_micro_batch_size": "3"},
     "train.args.train_micro_batch_size", "not a multiple"),
    ("rollout-micro-batch-zero", {"train.args.rollout_micro_batch_size": "0"},
     "train.args.rollout_micro_batch_size", "not a positive integer"),
    ("trainer-fraction", {"train.args.trainer_devices_fraction": "1.5"},
     "train.args.trainer_devices_fraction", "not in (0, 1]"),
    ("ici-fills-slice-not-trainer", {"train.args.ici_fsdp_parallelism": "4"},
     "train.args.ici_*_parallelism", "16 trainer devices per slice"),
    ("sampler-mesh-too-small", {"train.args.sampler_devices_fraction": "0.125"},
     "train.args.ici_*_parallelism", "4 sampler devices per slice"),
    ("rollout-product", {"train.args.rollout_data_parallelism": "2"},
     "train.args.rollout_*_parallelism", "is not the 16 sampler devices"),
    ("rollout-two-wildcards", {"train.args.rollout_tensor_parallelism": "-1"},
     "train.args.rollout_*_parallelism", "more than one of data, tensor and expert"),
    ("dcn-mismatch", {"gke.num_slices": "2", "train.args.dcn_data_parallelism": "3"},
     "train.args.dcn_*_parallelism", "2 slice(s)"),
]

# (case id, overrides, field, words of its fix): the MaxText rules say how to fix them.
FIXES = [
    ("nodepool-count-retired", {"gke.nodepool_count": "2"}, "gke.nodepool_count",
     "set gke.num_slices to the number of slices"),
    ("micro-batch-not-dividing", {"train.args.train_micro_batch_size": "3"},
     "train.args.train_micro_batch_size",
     "set train.args.train_micro_batch_size=2 (the largest divisor of batch_size 8 below it)"),
    ("trainer-fraction", {"train.args.trainer_devices_fraction": "0"},
     "train.args.trainer_devices_fraction", "set train.args.trainer_devices_fraction=0.5"),
    ("ici-fills-slice-not-trainer", {"train.args.ici_fsdp_parallelism": "4"},
     "train.args.ici_*_parallelism", "set train.args.ici_fsdp_parallelism=-1"),
    ("rollout-product", {"train.args.rollout_data_parallelism": "2"},
     "train.args.rollout_*_parallelism", "train.args.rollout_data_parallelism=-1 (data "
     "parallelism fills in the rest of the 16 sampler devices)"),
    ("rollout-two-wildcards", {"train.args.rollout_tensor_parallelism": "-1"},
     "train.args.rollout_*_parallelism", "train.args.rollout_data_parallelism=-1 (data "
     "parallelism fills in"),
]


@pytest.mark.parametrize(("case", "overrides", "field", "fix"), FIXES, ids=[c[0] for c in FIXES])
def test_rule_names_the_field_and_the_fix(case, overrides, field, fix, tutorial_overrides):
    with pytest.raises(ProfileError) as caught:
        load_profile(TUTORIAL, {**tutorial_overrides, **overrides}, environ={})
    assert [i for i in caught.value.issues if i.field == field and fix in i.fix], \
        f"{case}: {[i.render() for i in caught.value.issues]}"


@pytest.mark.parametrize("overrides", [
    # no split: the trainer shares the 32 devices, and its weights sit inside vLLM's share,
    # so a replica spreads the experts over 8 devices (the rollout check's own fix)
    {"train.args.use_pathways": "false", "train.args.ici_fsdp_parallelism": "4",
     "train.args.rollout_data_parallelism": "4", "train.args.rollout_expert_parallelism": "8"},
    {"train.args.train_micro_batch_size": "4"},
    {"train.args.rollout_data_parallelism": "4"},  # 4 × 1 × 4 = the 16 sampler devices
    {"gke.num_slices": "2"},  # dcn_data_parallelism defaults to -1: fills the 2 slices
    {"train.args.mesh_axes": "['data']", "train.args.ici_fsdp_parallelism": "7"},  # not modelled
], ids=["no-pathways-split", "micro-batch-divides", "rollout-exact", "two-slices",
        "custom-mesh"])
def test_what_maxtext_accepts_is_accepted(overrides, tutorial_overrides):
    load_profile(TUTORIAL, {**tutorial_overrides, **overrides}, environ={})


def test_retired_key_is_refused_in_a_file_too(tmp_path: Path, tutorial_overrides):
    from flows.common.paths import PROFILES_DIR

    data = yaml.safe_load((PROFILES_DIR / f"{TUTORIAL}.yaml").read_text())
    data["gke"]["nodepool_count"] = 1
    data["name"] = "old"
    path = tmp_path / "old.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ProfileError) as caught:
        load_profile(str(path), tutorial_overrides, environ={})
    (issue,) = caught.value.issues
    assert (issue.field, issue.category) == ("gke.nodepool_count", "config/retired")
    assert "gke.num_slices" in issue.problem


@pytest.mark.parametrize(("case", "overrides", "field", "words"), INVALID,
                         ids=[c[0] for c in INVALID])
def test_invalid_profile_is_rejected_naming_field_and_fix(case, overrides, field, words,
                                                         tutorial_overrides):
    with pytest.raises(ProfileError) as caught:
        load_profile(TUTORIAL, {**tutorial_overrides, **overrides}, environ={})
    issues = caught.value.issues
    matching = [i for i in issues if i.field == field]
    assert matching, f"{case}: no issue for {field}; got {[i.field for i in issues]}"
    assert any(words in i.problem or words in i.fix for i in matching), \
        f"{case}: {[i.render() for i in matching]}"
    assert all(i.fix for i in issues), "every issue carries a fix"


def test_messages_are_distinct():
    """Each case is caught by its own message, not one catch-all."""
    messages = set()
    for _case, overrides, field, _words in INVALID:
        try:
            load_profile(TUTORIAL, {**_required(), **overrides}, environ={})
        except ProfileError as exc:
            messages.add(next(i.problem for i in exc.issues if i.field == field))
    assert len(messages) >= 15


def _required() -> dict[str, str]:
    from tests.support.profiles import TUTORIAL_REQUIRED

    return dict(TUTORIAL_REQUIRED)


def test_missing_required_fields_name_every_way_to_set_them():
    with pytest.raises(ProfileError) as caught:
        load_profile(TUTORIAL, environ={})
    fields = {i.field for i in caught.value.issues}
    assert fields == {"gke.project", "gke.region", "gke.zone", "gke.cluster", "gke.bucket",
                      "gke.reservation", "gke.authorized_cidr"}
    text = str(caught.value)
    assert "--set gke.project=VALUE" in text and "TPURL_GKE__PROJECT" in text


def test_missing_fields_of_a_flow_run_name_its_overrides_parameter_not_the_cli():
    """A deployment's user cannot pass --set: the run's `overrides` parameter or the
    deployment's env is what they can change."""
    with pytest.raises(ProfileError) as caught:
        load_profile(TUTORIAL, environ={}, origin="flow")
    missing = {i.field: i.fix for i in caught.value.issues}
    assert len(missing) == 7 and "--set" not in str(caught.value)
    for field, fix in missing.items():
        env_name = "TPURL_" + field.upper().replace(".", "__")
        assert f'overrides parameter {{"{field}": "VALUE"}}' in fix and env_name in fix, fix


def test_environment_then_cli_overrides(tutorial_overrides):
    env = {f"TPURL_{k.upper().replace('.', '__')}": v for k, v in tutorial_overrides.items()}
    profile = load_profile(TUTORIAL, {"gke.cluster": "from-cli"}, environ=env)
    assert profile.gke.project == "my-proj-123"
    assert profile.gke.cluster == "from-cli"


def test_unknown_profile_name_suggests_the_close_one():
    with pytest.raises(ProfileError, match="did you mean 'rehearsal'"):
        load_profile("rehersal", environ={})


def test_profile_path_and_yaml_errors(tmp_path: Path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(ProfileError, match="not valid YAML"):
        load_profile(str(bad), environ={})
    listy = tmp_path / "list.yaml"
    listy.write_text("- a\n- b\n")
    with pytest.raises(ProfileError, match="not a mapping"):
        load_profile(str(listy), environ={})


def test_shipped_profiles_are_valid(tutorial_overrides):
    tutorial = load_profile(TUTORIAL, tutorial_overrides, environ={})
    assert tutorial.gke.total_chips == 32
    assert tutorial.image.base.endswith("tpu_post_training:0.2.4")
    assert tutorial.gke.cluster_toolkit_version == "v1.103.0"
    assert tutorial.model.hf_repo == "Qwen/Qwen3-30B-A3B-Instruct-2507"
    rehearsal = load_profile("rehearsal", environ={})
    assert rehearsal.backend == "local"


def test_written_profile_round_trips(tmp_path: Path, tutorial_overrides):
    """A user's copy of a profile, with fields filled in, loads by path, named by its file."""
    from flows.common.paths import PROFILES_DIR

    data = yaml.safe_load((PROFILES_DIR / f"{TUTORIAL}.yaml").read_text())
    for dotted, value in tutorial_overrides.items():
        section, key = dotted.split(".")
        data[section][key] = value
    del data["name"]
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(data))
    mine = load_profile(str(path), environ={})
    assert mine.gke.bucket == "my-tpurl-bucket" and mine.name == "mine"


def _issues(overrides: dict[str, str]) -> dict[str, str]:
    with pytest.raises(ProfileError) as err:
        load_profile(TUTORIAL, {**TUTORIAL_REQUIRED, **overrides}, environ={})
    return {i.field: f"{i.problem} || {i.fix}" for i in err.value.issues}


def test_every_capacity_problem_is_reported_in_one_round() -> None:
    """flex-start with the tutorial's reservation left in, no flex-start price and no
    max_run_hours: three fixes, one `tpurl validate`."""
    issues = _issues({"gke.capacity": "flex-start"})
    assert {"gke.reservation", "gke.prices", "gke.max_run_hours"} <= set(issues), issues
    spot = _issues({"gke.capacity": "spot"})
    assert {"gke.reservation", "gke.prices"} <= set(spot), spot


def test_the_fix_for_removing_a_field_says_how() -> None:
    issues = _issues({"gke.capacity": "on-demand"})
    assert "--set gke.reservation=" in issues["gke.reservation"]
    # an empty --set removes the field the file sets (loading._set_path), as an empty YAML
    # field does
    off_flex = _issues({"gke.max_run_hours": "10"})
    assert "pass --set gke.max_run_hours= (or delete it from the profile file)" in off_flex[
        "gke.max_run_hours"]


@pytest.mark.parametrize(("profile", "stray", "field"), [
    (TUTORIAL, {"local.root": "/tmp/stray"}, "local"),
    ("rehearsal", None, "gke"),
], ids=["gke-with-local", "local-with-gke"])
def test_a_profile_with_two_backend_sections_is_refused(profile, stray, field,
                                                        tutorial_overrides):
    """A profile has one backend section: a GKE profile with a stray local: section would
    otherwise get the rehearsal's infra key."""
    overrides = {**tutorial_overrides, **stray} if stray else {
        k: v for k, v in tutorial_overrides.items() if k.startswith("gke.")}
    if profile == "rehearsal":
        overrides["model.hf_token.env"] = "HF_TOKEN"
    with pytest.raises(ProfileError) as caught:
        load_profile(profile, overrides, environ={})
    (issue,) = [i for i in caught.value.issues if i.field == field]
    assert "one backend section" in issue.problem and f"remove the {field}: section" in issue.fix


@pytest.mark.parametrize("source", ["env", "secret_block", "gcp_secret"])
def test_a_token_written_where_its_source_is_named_is_refused_unquoted(source: str) -> None:
    """`hf_token: {env: hf_...}`: accepted before, and every later error ("the environment
    variable hf_... is not set", "no Prefect Secret block named 'hf_...'") quoted the token."""
    token = fake_hf_token("AsSourceName")
    with pytest.raises(ProfileError) as caught:
        load_profile("rehearsal", {f"model.hf_token.{source}": token}, environ={})
    text = f"{caught.value}\n{caught.value!r}"
    assert token not in text and "model.hf_token" in text and "revoke" in text, text


@pytest.mark.parametrize("field", ["model.hf_revision", "model.hf_repo", "description",
                                   "data.train_files", "local.root"])
def test_a_token_pasted_into_any_text_field_is_refused_unquoted(field: str) -> None:
    """A revision, a path or a description travels into plans, lineage records, command
    lines and results: a token there would reach every one of them."""
    token = fake_hf_token("PastedField")
    with pytest.raises(ProfileError) as caught:
        load_profile("rehearsal", {field: token}, environ={})
    text = str(caught.value)
    assert token not in text and f"{field}: holds what looks like a Hugging Face token" in text


# 12 h nodes (capacity_overrides' max_run_hours); 13 h of watch budget
LONG_BUDGET = str(13 * 3600)


@pytest.mark.parametrize("field", ["gke.train_run_budget_s", "gke.run_budget_s"])
@pytest.mark.parametrize("mode", ["reservation", "flex-start", "spot", "on-demand"])
def test_a_flex_start_training_budget_beyond_the_nodes_lifetime_is_refused(
        mode: str, field: str) -> None:
    """A flex-start profile could give the training a run budget of 13 h on nodes that end
    after 12 (gke.max_run_hours): accepted, and no attempt could ever run that long. The
    training's budget is gke.train_run_budget_s, else gke.run_budget_s; the other modes'
    nodes have no such end, so the same budget stays theirs to choose."""
    from tests.support.profiles import INFRA_OVERRIDES, capacity_overrides

    sets = {**INFRA_OVERRIDES, **capacity_overrides(mode), field: LONG_BUDGET}
    if mode != "flex-start":
        assert load_profile(TUTORIAL, sets, environ={}).gke is not None
        return
    found = _issues(sets)
    assert set(found) == {field}, found
    assert found[field] == (
        "46800 s (13 h) lets the training run longer than gke.max_run_hours (12 h): flex-start "
        "and queued nodes end after their maximum run duration, so no attempt can run that long || "
        f"set {field}=43200 (gke.max_run_hours x 3600), or raise "
        "gke.max_run_hours (at most 168)")
    fits = load_profile(TUTORIAL, {**sets, field: "43200"}, environ={})
    assert fits.gke is not None and fits.gke.max_run_hours == 12
    # a conversion-only budget: train_run_budget_s governs the training, run_budget_s
    # then bounds convert and export on the CPU pool, where no node lifetime applies
    if field == "gke.run_budget_s":
        assert load_profile(TUTORIAL, {**sets, "gke.train_run_budget_s": "43200"},
                            environ={}).gke is not None
