"""The infra stage end to end against the fake cloud: exact commands, idempotency, a deploy
that fails half-way and succeeds on retry, state kept in the bucket, pre-flight gating."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from flows.backends.gke.infra.blueprint import find_module
from flows.backends.gke.infra.provision import provision
from flows.backends.gke.infra.settings import InfraSettings, settings_from_profile
from flows.config import load_profile
from flows.core.failures import FailureCategory, StageFailed
from tests.fakes.cloud import Cloud
from tests.fakes.cloud import fakecloud_state as fake_cloud
from tests.support.logs import Log
from tests.support.profiles import INFRA_OVERRIDES, SMOKE, TUTORIAL, infra_profile, with_gke

WL = "serviceAccount:tpurl-v6e-gke-wl-sa@my-proj-123.iam.gserviceaccount.com"
NP = "serviceAccount:tpurl-v6e-gke-np-sa@my-proj-123.iam.gserviceaccount.com"
DEPLOY_TAIL = [
    "deploy", "gke-tpu-v6e-advanced.yaml", "--vars",
    "project_id=my-proj-123,deployment_name=tpurl-v6e,region=us-east5,zone=us-east5-b,"
    "num_slices=1,tpu_topology=4x8,authorized_cidr=203.0.113.0/24,reservation=my-v6e-res,"
    "machine_type=ct6e-standard-4t,accelerator_type=tpu-v6e-slice",
    "--download-dependencies", "-l", "IGNORE", "--auto-approve", "-w"]
# The tutorial's storage.admin for both accounts is the blueprint's own (its workload
# account's project_roles, and the node pool account's after the tutorial's edit): Terraform
# binds it, so tpurl's gcloud has nothing left to grant
GCLOUD_FIRST_RUN = [
    ["container", "clusters", "get-credentials", "tpurl-v6e", "--region=us-east5",
     "--project=my-proj-123"],
    ["auth", "configure-docker", "gcr.io", "--quiet"],
    ["auth", "configure-docker", "us-east5-docker.pkg.dev", "--quiet"],
]


def _provision(settings: InfraSettings, cloud: Cloud, gcs: Any, log: Log | None = None):
    return provision(settings, cloud.apis, gcs, log or Log())


def test_first_run_runs_the_tutorial_then_a_second_run_runs_nothing(
        settings: InfraSettings, cloud: Cloud, gcs: Any) -> None:
    settings = with_gke(settings, iam_mode="project-storage-admin")  # the tutorial's, not ours
    report = _provision(settings, cloud, gcs)
    assert report.bucket_created and report.deployed
    assert cloud.calls("gcluster") == [DEPLOY_TAIL]
    assert cloud.calls("gcloud") == GCLOUD_FIRST_RUN
    assert report.idle_usd_per_hour == pytest.approx(86.40)
    # the blueprint gcluster saw carries the tutorial's edit
    expanded = settings.deployment_dir / ".ghpc" / "artifacts" / "expanded_blueprint.yaml"
    assert "- storage.admin" in expanded.read_text()
    # the deployment folder (Terraform state, not the provider binaries) is in the bucket
    names = {b.name for b in gcs.list_blobs("my-tpurl-bucket", prefix="tpurl/gcluster/")}
    assert "tpurl/gcluster/tpurl-v6e/deployment/primary/terraform.tfstate" in names
    assert not any("/.terraform/" in n for n in names)
    assert "tpurl/gcluster/tpurl-v6e/deployment.json" in names

    again = _provision(settings, cloud, gcs)
    assert not again.deployed and not again.bucket_created
    assert again.granted == [] and again.docker_registries == []
    assert "matches the profile" in again.deploy_skipped_reason
    assert cloud.calls("gcluster") == [DEPLOY_TAIL]       # nothing new
    assert cloud.calls("gcloud") == GCLOUD_FIRST_RUN      # nothing new


def test_deploy_fails_half_way_then_the_retry_continues_the_same_state(
        settings: InfraSettings, cloud: Cloud, gcs: Any) -> None:
    cloud.cue("gcluster deploy", "fail-halfway")
    with pytest.raises(StageFailed) as err:
        _provision(settings, cloud, gcs)
    assert err.value.diagnosis.category == FailureCategory.INFRASTRUCTURE  # Prefect retries it
    assert "timeout while waiting for state" in str(err.value)
    state = "tpurl/gcluster/tpurl-v6e/deployment/primary/terraform.tfstate"
    assert gcs.bucket("my-tpurl-bucket").blob(state).download_as_text() == "partial=true serial=1"
    # the retry runs on another machine: nothing local survives, the bucket has the state
    shutil.rmtree(settings.cache_dir / "gcluster")
    report = _provision(settings, cloud, gcs)
    assert report.deployed
    assert cloud.calls("gcluster") == [DEPLOY_TAIL, DEPLOY_TAIL]
    assert gcs.bucket("my-tpurl-bucket").blob(state).download_as_text() == "partial=false serial=2"


def test_quota_failure_in_terraform_is_a_user_error(settings: InfraSettings, cloud: Cloud,
                                                    gcs: Any) -> None:
    cloud.cue("gcluster deploy", "fail-quota")
    with pytest.raises(StageFailed) as err:
        _provision(settings, cloud, gcs)
    assert err.value.diagnosis.category == FailureCategory.USER_ERROR


def test_failed_preflight_creates_nothing(settings: InfraSettings, cloud: Cloud,
                                          gcs: Any) -> None:
    cloud.apis.reservation = None
    with pytest.raises(StageFailed) as err:
        _provision(settings, cloud, gcs)
    assert "pre-flight checks failed; nothing was created" in str(err.value)
    assert "gcloud compute reservations list" in str(err.value)
    assert gcs.lookup_bucket("my-tpurl-bucket") is None
    assert cloud.calls() == []


def test_world_open_cidr_is_warned_loudly(settings: InfraSettings, cloud: Cloud,
                                          gcs: Any) -> None:
    log = Log()
    world = with_gke(settings, authorized_cidr="0.0.0.0/0")
    report = _provision(world, cloud, gcs, log)
    assert any("WARNING: gke.authorized_cidr is 0.0.0.0/0" in line for line in log.lines)
    assert any("whole internet" in w for w in report.warnings)
    assert "authorized_cidr=0.0.0.0/0" in cloud.calls("gcluster")[0][3]


def test_bucket_scoped_mode_grants_on_the_bucket_only(settings: InfraSettings, cloud: Cloud,
                                                      gcs: Any) -> None:
    scoped = settings
    assert scoped.gke.iam_mode == "bucket-scoped"  # the default, the tutorial profile's too
    report = _provision(scoped, cloud, gcs)
    iam_calls = [c for c in cloud.calls("gcloud") if "add-iam-policy-binding" in c]
    assert all(c[:4] == ["storage", "buckets", "add-iam-policy-binding", "gs://my-tpurl-bucket"]
               for c in iam_calls)
    assert len(iam_calls) == 4 and len(report.granted) == 4
    expanded = scoped.deployment_dir / ".ghpc" / "artifacts" / "expanded_blueprint.yaml"
    doc = YAML(typ="safe").load(expanded.read_text())  # no project-wide edit
    roles = find_module(doc, "node_pool_service_account")["settings"]["project_roles"]
    assert "storage.objectViewer" in roles and "storage.admin" not in roles


def test_a_foreign_cluster_that_differs_is_not_deployed_over(settings: InfraSettings,
                                                             cloud: Cloud, gcs: Any) -> None:
    state = cloud.state()
    state.setdefault("project_policy", {"bindings": []})
    state.setdefault("bucket_policies", {})
    state["clusters"]["tpurl-v6e"] = {"name": "tpurl-v6e", "status": "RUNNING", "nodePools": []}
    (cloud.home / "state.json").write_text(__import__("json").dumps(state))
    with pytest.raises(StageFailed, match="no deployment folder was found"):
        _provision(settings, cloud, gcs)
    assert cloud.calls("gcluster") == []


def test_the_runtime_identity_cannot_deploy_and_is_told_whose_step_it_is(
        settings: InfraSettings, cloud: Cloud, gcs: Any) -> None:
    """A scheduled run's identity holds the runtime needs only. When its infra
    stage must deploy (no cluster yet), pre-flight tests the infra permissions of the caller
    and refuses, naming the infra identity, before a bucket, a binding or gcluster."""
    from flows.backends.gke import identity

    cloud.apis.permissions = set(identity.permissions())
    with pytest.raises(StageFailed) as err:
        _provision(settings, cloud, gcs)
    diagnosis = err.value.diagnosis
    assert diagnosis.category == FailureCategory.USER_ERROR
    assert "container.clusterRoles.create" in diagnosis.detail
    assert "tpurl flow-identity PROFILE --identity infra" in diagnosis.detail
    assert cloud.calls("gcluster") == [] and cloud.calls("gcloud") == []
    assert list(gcs.list_buckets()) == []


def test_team_bs_deploy_never_takes_team_as_pool_away(
        cloud: Cloud, gcs: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two teams' profiles on one cluster: research's tutorial profile (a 4x8 reservation
    pool) deploys it, then product's smoke profile (2x4 on-demand). Before, product's
    blueprint held its own pool alone, under research's pool's name, and replaced it under
    its running work. Now each team's pools are its own and every deploy holds both:
    research's deploy already made product's pool; with it gone (deleted by hand),
    product's deploy, through the fake gcluster and Terraform's rules, makes it again and
    leaves research's as research made it; research's next run deploys nothing."""
    teams = tmp_path / "teams.yaml"
    teams.write_text(f"teams:\n  research: {{usd_per_month: 900, profiles: [{TUTORIAL}]}}\n"
                     f"  product: {{usd_per_month: 500, profiles: [{SMOKE}]}}\n")
    monkeypatch.setenv("TPURL_TEAMS_FILE", str(teams))
    research = settings_from_profile(infra_profile(), cache_dir=tmp_path / "cache")
    assert _provision(research, cloud, gcs).deployed
    before = cloud.apis.get_cluster("my-proj-123", "us-east5", "tpurl-v6e")
    [theirs] = [p for p in before["nodePools"] if p["name"].startswith("tpu-research-")]
    product = settings_from_profile(load_profile(SMOKE, {**INFRA_OVERRIDES, "gke.reservation":
                                                         ""}, environ={}),
                                    cache_dir=tmp_path / "cache")
    assert not _provision(product, cloud, gcs).deployed  # research's deploy made its pool
    state = fake_cloud.load()
    pools = state["clusters"]["tpurl-v6e"]["nodePools"]
    state["clusters"]["tpurl-v6e"]["nodePools"] = [p for p in pools
                                                   if not p["name"].startswith("tpu-product-")]
    fake_cloud.save(state)
    assert _provision(product, cloud, gcs).deployed
    assert len(cloud.calls("gcluster")) == 2
    live = cloud.apis.get_cluster("my-proj-123", "us-east5", "tpurl-v6e")
    [kept] = [p for p in live["nodePools"] if p["name"] == theirs["name"]]
    assert kept == theirs and kept["placementPolicy"]["tpuTopology"] == "4x8"
    [ours] = [p for p in live["nodePools"] if p["name"].startswith("tpu-product-")]
    assert ours["placementPolicy"]["tpuTopology"] == "2x4"
    assert ours["config"]["labels"]["tpurl/team"] == "product"
    assert not _provision(research, cloud, gcs).deployed  # its pool is as it wants it


def test_a_cluster_deployed_before_fair_sharing_gets_it_by_following_the_fix(
        cloud: Cloud, gcs: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The deploy installs Kueue's chart with fairSharing in its values (decision 0041).
    A cluster whose Kueue kubectl-apply installed has the chart's default configuration:
    the team-queues check warns with the fix `tpurl run PROFILE`, and the run's infra stage
    re-applies the blueprint for that alone; then the live configuration has it, the check
    is ok, and the next run deploys nothing."""
    from flows.backends.gke.infra.infra_stage import planned_for
    from flows.backends.gke.infra.preflight.team_queues import FAIR_SHARING_FIX
    from tests.fakes.cloud.helm_modules import CHART_DEFAULT_CONFIG

    teams = tmp_path / "teams.yaml"
    teams.write_text(f"teams:\n  research: {{usd_per_month: 900, profiles: [{TUTORIAL}], "
                     f"fair_weight: 2}}\n  product: {{usd_per_month: 500, profiles: [{SMOKE}]}}\n")
    monkeypatch.setenv("TPURL_TEAMS_FILE", str(teams))
    research = settings_from_profile(infra_profile(), cache_dir=tmp_path / "cache")
    planned = planned_for(infra_profile())  # the run's pods: the queue checks run

    def run() -> Any:
        return provision(research, cloud.apis, gcs, Log(), planned=planned)
    assert run().deployed
    assert "fairSharing" in fake_cloud.load()["kueue_manager_config"]
    state = fake_cloud.load()
    state["kueue_manager_config"] = CHART_DEFAULT_CONFIG  # as kubectl-apply's install left it
    fake_cloud.save(state)
    report = run()
    [check] = [c for c in report.checks if c["name"] == "team-queues"]
    assert check["status"] == "warn" and "weights order nothing" in check["summary"]
    assert check["fix"] == FAIR_SHARING_FIX and "`tpurl run PROFILE`" in check["fix"]
    assert report.deployed and len(cloud.calls("gcluster")) == 2  # following the fix
    assert "fairSharing" in fake_cloud.load()["kueue_manager_config"]
    again = run()
    [check] = [c for c in again.checks if c["name"] == "team-queues"]
    assert check["status"] == "ok" and not again.deployed


def _workload(name: str, *conditions: str) -> dict[str, Any]:
    """A Kueue Workload of team product's namespace with each condition True."""
    return {"metadata": {"namespace": "product", "name": name},
            "status": {"conditions": [{"type": c, "status": "True"} for c in conditions]}}


def test_no_deploy_reinstalls_kueue_under_another_teams_running_workload(
        cloud: Cloud, gcs: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first deploy after the chart install (decision 0041) removes kubectl-apply's Kueue
    release, its CRDs and every Workload with it: team product's admitted Workload would be
    suspended under it. While one is admitted and not finished, team research's run does not
    deploy for fair sharing alone (a warning; its run goes on), and a deploy it needs for more
    is refused naming the workload; once the workload finished, the run deploys."""
    from flows.backends.gke.infra.infra_stage import planned_for
    from tests.fakes.cloud.helm_modules import CHART_DEFAULT_CONFIG

    teams = tmp_path / "teams.yaml"
    teams.write_text(f"teams:\n  research: {{usd_per_month: 900, profiles: [{TUTORIAL}]}}\n"
                     f"  product: {{usd_per_month: 500, profiles: [{SMOKE}]}}\n")
    monkeypatch.setenv("TPURL_TEAMS_FILE", str(teams))
    research = settings_from_profile(infra_profile(), cache_dir=tmp_path / "cache")
    planned = planned_for(infra_profile())
    assert provision(research, cloud.apis, gcs, Log(), planned=planned).deployed
    state = fake_cloud.load()
    state["kueue_manager_config"] = CHART_DEFAULT_CONFIG  # as kubectl-apply's install left it
    state["workloads"] = [_workload("jobset-train-rl-b", "QuotaReserved", "Admitted"),
                          _workload("jobset-old", "Admitted", "Finished"),
                          _workload("jobset-queued", "QuotaReserved")]
    fake_cloud.save(state)
    report = provision(research, cloud.apis, gcs, Log(), planned=planned)
    assert not report.deployed and len(cloud.calls("gcluster")) == 1
    [warning] = [w for w in report.warnings if "fair sharing is not set yet" in w]
    assert "product/jobset-train-rl-b" in warning and "jobset-old" not in warning
    assert "jobset-queued" not in warning  # not admitted: nothing of it runs
    # a deploy needed for more than fair sharing (research's own pool gone) is refused
    state = fake_cloud.load()
    pools = state["clusters"]["tpurl-v6e"]["nodePools"]
    state["clusters"]["tpurl-v6e"]["nodePools"] = [p for p in pools
                                                   if not p["name"].startswith("tpu-research-")]
    fake_cloud.save(state)
    with pytest.raises(StageFailed) as refused:
        provision(research, cloud.apis, gcs, Log(), planned=planned)
    assert "product/jobset-train-rl-b" in str(refused.value)
    assert "`kubectl get workloads -A`" in refused.value.diagnosis.fix
    assert len(cloud.calls("gcluster")) == 1  # nothing deployed
    state = fake_cloud.load()
    state["workloads"][0]["status"]["conditions"].append({"type": "Finished",
                                                          "status": "True"})
    fake_cloud.save(state)
    assert provision(research, cloud.apis, gcs, Log(), planned=planned).deployed  # the fix
    assert "fairSharing" in fake_cloud.load()["kueue_manager_config"]


def test_kueues_workloads_unread_are_not_taken_for_idle(
        cloud: Cloud, gcs: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """When the Workloads cannot be read (403), what a reinstall would stop is unknown: the
    run does not deploy for fair sharing, and says why."""
    from flows.backends.gke.infra.cloud import ApiDenied
    from flows.backends.gke.infra.infra_stage import planned_for
    from tests.fakes.cloud.helm_modules import CHART_DEFAULT_CONFIG

    teams = tmp_path / "teams.yaml"
    teams.write_text(f"teams:\n  research: {{usd_per_month: 900, profiles: [{TUTORIAL}]}}\n")
    monkeypatch.setenv("TPURL_TEAMS_FILE", str(teams))
    research = settings_from_profile(infra_profile(), cache_dir=tmp_path / "cache")
    planned = planned_for(infra_profile())
    assert provision(research, cloud.apis, gcs, Log(), planned=planned).deployed
    state = fake_cloud.load()
    state["kueue_manager_config"] = CHART_DEFAULT_CONFIG
    fake_cloud.save(state)

    def denied(cluster: dict[str, Any]) -> list[str]:
        raise ApiDenied("https://1.2.3.4/apis/kueue.x-k8s.io/v1beta1/workloads: forbidden")
    monkeypatch.setattr(cloud.apis, "admitted_workloads", denied)
    report = provision(research, cloud.apis, gcs, Log(), planned=planned)
    assert not report.deployed and len(cloud.calls("gcluster")) == 1
    assert any("could not be read" in w and "forbidden" in w for w in report.warnings)
