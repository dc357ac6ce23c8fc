"""The infra stage's grants, then the next stage's pods using them, against an IAM that
enforces a grant only once it has propagated (tests/fakes/cloud/iam_propagation.py cites
Google's "typically 2 minutes, potentially 7").

Before, the fake cloud enforced a grant the moment the fake gcloud made it, so nothing
tested a pod refused with GCS's 403 right after the infra stage granted its account the
role: read as the program's own error, the stage failed (a user error, not retried)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from flows.backends.gke.iam_propagation import CODE, grants_path, load
from flows.backends.gke.infra.provision import provision
from flows.backends.gke.infra.settings import InfraSettings
from flows.core.failures import FailureCategory, StageFailed
from tests.fakes.cloud import Cloud
from tests.fakes.cloud.iam_propagation import Propagation
from tests.fakes.gke_backend import BUDGETS, jobsets_created, run_stage
from tests.fakes.kube_api import FakeApiServer, FakeKube
from tests.fakes.kube_api.scenarios import admit, exit_with, say, scenario, start, succeed
from tests.support.logs import Log
from tests.support.profiles import fake_hf_token, infra_profile

BUCKET = "my-tpurl-bucket"
WL = "serviceAccount:tpurl-v6e-gke-wl-sa@my-proj-123.iam.gserviceaccount.com"
# the pods of a profile in no team: the namespace's default account's principal, of the fake
# project's number (0, as fake-gcs-server reports it)
POD = ("principal://iam.googleapis.com/projects/0/locations/global/workloadIdentityPools/"
       "my-proj-123.svc.id.goog/subject/ns/default/sa/default")
NP = "serviceAccount:tpurl-v6e-gke-np-sa@my-proj-123.iam.gserviceaccount.com"
WAITS = "waiting for IAM propagation"


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeApiServer]:
    monkeypatch.setenv("HF_TOKEN", fake_hf_token("Zr8mQ2wYtE"))
    with FakeApiServer(FakeKube()) as srv:
        yield srv


def _provisioned(settings: InfraSettings, cloud: Cloud, gcs: Any,
                 monkeypatch: pytest.MonkeyPatch) -> float:
    """The infra stage, bucket-scoped (its default): it grants the cluster's accounts their
    roles on the bucket; the stage that follows finds its record in the same cache. Returns
    the age of its grants."""
    monkeypatch.setenv("TPURL_CACHE_DIR", str(settings.cache_dir))
    report = provision(settings, cloud.apis, gcs, Log())
    assert len(report.granted) == 4
    recorded = load(grants_path(settings.workdir))
    assert {(g.role, g.member) for g in recorded} >= {("roles/storage.objectAdmin", POD)}
    return time.time() - min(cloud.state()["grant_times"].values())


def _program(iam: Propagation, permission: str, member: str = POD
             ) -> Callable[[FakeKube, str], None]:
    """The stage's program writes its output to the bucket as ``member`` (the workload
    pods' team principal unless said): the upload is refused (the traceback, exit 1) while IAM refuses
    it, else it succeeds."""
    def writes(kube: FakeKube, name: str) -> None:
        refused = iam.refusal(member, permission, BUCKET, "tpurl/out/0/items/manifest.ocdbt")
        if refused:
            say(*refused)(kube, name)
            exit_with(1)(kube, name)
        else:
            say("saved checkpoint to 0/items")(kube, name)
            succeed(kube, name)
    writes.__name__ = "program_writes"
    return writes


def _attempts(iam: Propagation, permission: str, count: int, member: str = POD) -> list[Any]:
    return [[(0.05, admit), (0.05, start), (0.05, _program(iam, permission, member))]] * count


def test_a_403_right_after_the_infra_stages_grant_is_waited_out_then_the_stage_succeeds(
        settings: InfraSettings, cloud: Cloud, gcs: Any, server: FakeApiServer,
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """IAM enforces the grant only after it refused the first upload (a lag counted in
    requests: one in seconds had to outlast the first attempt on a loaded machine, 20 s, all
    waited out): it is refused, the stage says it waits for IAM propagation and resubmits,
    and succeeds."""
    age = _provisioned(settings, cloud, gcs, monkeypatch)
    iam = cloud.apis.iam
    iam.lagging_checks = 1
    iam.from_state(cloud.state())
    kube = scenario(server.kube, *_attempts(iam, "storage.objects.create", 20))
    budgets = dataclasses.replace(BUDGETS, iam_propagation_s=age + 60.0)
    outcome, logger, _, _ = run_stage(server, "train", tmp_path, budgets, infra_profile())
    assert not isinstance(outcome, StageFailed), outcome
    assert iam.refused >= 1 and jobsets_created(kube) == iam.refused + 1
    waits = [line for line in logger.lines if WAITS in line]
    assert len(waits) == iam.refused
    assert "storage.objects.create was refused to " + POD in waits[0]
    assert "granted roles/storage.objectAdmin on bucket my-tpurl-bucket" in waits[0]


def test_a_403_for_a_permission_tpurl_did_not_grant_fails_at_once(
        settings: InfraSettings, cloud: Cloud, gcs: Any, server: FakeApiServer,
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No role the node pool account was just granted (the bucket roles tpurl grants, the
    blueprint's storage.objectViewer) includes storage.buckets.update: its 403 is the
    program's error, not a lag, and is not retried. (The workload account's blueprint
    storage.admin would include it.)"""
    _provisioned(settings, cloud, gcs, monkeypatch)
    iam = cloud.apis.iam  # enforced at once (its default)
    iam.from_state(cloud.state())
    kube = scenario(server.kube, *_attempts(iam, "storage.buckets.update", 3, NP))
    outcome, logger, _, _ = run_stage(server, "train", tmp_path, BUDGETS, infra_profile())
    assert isinstance(outcome, StageFailed), outcome
    assert outcome.diagnosis.category is FailureCategory.USER_ERROR
    assert outcome.diagnosis.code != CODE and "Forbidden: 403" in outcome.diagnosis.summary
    assert jobsets_created(kube) == 1 and not any(WAITS in line for line in logger.lines)


def test_a_grant_still_refused_after_the_budget_fails_naming_the_role_the_account_and_the_fix(
        settings: InfraSettings, cloud: Cloud, gcs: Any, server: FakeApiServer,
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    age = _provisioned(settings, cloud, gcs, monkeypatch)
    iam = cloud.apis.iam
    iam.delay_s = 3600.0  # never within the test
    iam.from_state(cloud.state())
    kube = scenario(server.kube, *_attempts(iam, "storage.objects.create", 12))
    budgets = dataclasses.replace(BUDGETS, iam_propagation_s=age + 2.0)
    outcome, logger, _, _ = run_stage(server, "train", tmp_path, budgets, infra_profile())
    assert isinstance(outcome, StageFailed), outcome
    diagnosis = outcome.diagnosis
    assert diagnosis.code == CODE and diagnosis.category is FailureCategory.USER_ERROR
    assert f"storage.objects.create is still refused to {POD}" in diagnosis.summary
    assert "roles/storage.objectAdmin on bucket my-tpurl-bucket" in diagnosis.summary
    assert f"gcloud storage buckets get-iam-policy gs://{BUCKET}" in diagnosis.fix
    assert any(WAITS in line for line in logger.lines)
    assert jobsets_created(kube) == iam.refused >= 2


def test_the_blueprints_terraform_grants_are_waited_out_too(
        settings: InfraSettings, cloud: Cloud, gcs: Any, server: FakeApiServer,
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The node pool account reads the bucket by the blueprint's own storage.objectViewer
    (Cluster Toolkit's service-account module binds its project_roles in the same deploy):
    a read refused while that binding propagates is waited out like tpurl's own grants.
    Without the deploy's grants in the record, the 403 failed the stage at once."""
    age = _provisioned(settings, cloud, gcs, monkeypatch)
    recorded = {(g.role, g.member, g.resource) for g in load(grants_path(settings.workdir))}
    assert ("roles/storage.objectViewer", NP, "project my-proj-123") in recorded
    assert ("roles/storage.admin", WL, "project my-proj-123") in recorded
    iam = cloud.apis.iam
    iam.lagging_checks = 1  # the first read refused, as in the test above
    iam.from_state(cloud.state())
    kube = scenario(server.kube, *_attempts(iam, "storage.objects.get", 20, NP))
    budgets = dataclasses.replace(BUDGETS, iam_propagation_s=age + 60.0)
    outcome, logger, _, _ = run_stage(server, "train", tmp_path, budgets, infra_profile())
    assert not isinstance(outcome, StageFailed), outcome
    assert iam.refused >= 1 and jobsets_created(kube) == iam.refused + 1
    waits = [line for line in logger.lines if WAITS in line]
    assert waits and "storage.objects.get was refused to " + NP in waits[0]
