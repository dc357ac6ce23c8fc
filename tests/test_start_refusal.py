"""The flow refuses at start when this environment cannot run a GKE stage: the real flow on
a Prefect API, a profile whose builder is docker with no daemon, and no gcloud on PATH. It
must fail with every reason and fix before any task runs (nothing built, nothing deployed)."""

from __future__ import annotations

import pytest

from flows.backends.gke.infra import clients as infra_clients
from flows.config.errors import EnvironmentNotReady
from flows.pipeline import rl_post_training
from tests.support.profiles import TUTORIAL, TUTORIAL_REQUIRED, fake_hf_token

TOKEN_VAR = "TPURL_START_CHECK_HF_TOKEN"


def test_no_daemon_and_no_gcloud_refuse_before_any_task(prefect_api: None, tmp_path,
                                                        monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(TOKEN_VAR, fake_hf_token("StartCheck"))
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-daemon.sock")
    monkeypatch.setenv("PATH", str(tmp_path))  # no gcloud
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")  # as in a work pool's pod
    made: list[str] = []

    def default_clients(s):  # credentials are there (Workload Identity); record the call
        made.append(s.gke.project)
        return object(), object()

    monkeypatch.setattr(infra_clients, "default_clients", default_clients)
    state = rl_post_training(profile=TUTORIAL, overrides={
        **TUTORIAL_REQUIRED, "model.hf_token.env": TOKEN_VAR, "image.builder": "docker"},
        return_state=True)
    assert state.is_failed()
    error = state.result(raise_on_failure=False)
    assert isinstance(error, EnvironmentNotReady), error
    assert [i.category for i in error.issues] == ["environment/no-docker-daemon",
                                                  "environment/no-gcloud"]
    text = str(error)
    assert "nothing was started" in text and "CLOUD_TOOLS=1" in text
    assert "image.builder: cloud-build" in text
    assert made  # only the read-only credential probe ran
