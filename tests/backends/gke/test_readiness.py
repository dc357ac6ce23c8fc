"""The start check: what each stage needs where the flow runs (pure, no services)."""

from __future__ import annotations

import dataclasses

import pytest

from flows.backends.gke.image.builder import choose_builder
from flows.backends.gke.readiness import Environment, start_issues
from flows.config import Profile
from flows.config.errors import EnvironmentNotReady

READY = Environment(on_path=frozenset({"gcloud"}), docker_daemon=True,
                    docker_host="unix:///var/run/docker.sock", infra_credentials=None,
                    cloud_build_credentials=None, in_kubernetes=False)
# a Kubernetes work pool's pod: no daemon, no gcloud, Workload Identity credentials
POD = Environment(on_path=frozenset(), docker_daemon=False, docker_host="unix:///var/run/docker.sock",
                  infra_credentials=None, cloud_build_credentials=None, in_kubernetes=True)


def with_builder(profile: Profile, builder: str) -> Profile:
    return profile.model_copy(update={"image": profile.image.model_copy(update={"builder": builder})})


@pytest.mark.parametrize(("setting", "daemon", "chosen"), [
    ("auto", True, "docker"), ("auto", False, "cloud-build"), ("docker", False, "docker"),
    ("cloud-build", True, "cloud-build")])
def test_auto_prefers_a_daemon_that_answers(setting: str, daemon: bool, chosen: str):
    assert choose_builder(setting, daemon) == chosen


def test_a_ready_machine_has_no_issues(profile: Profile):
    assert start_issues(profile, READY) == []


def test_a_pod_without_gcloud_is_refused_for_infra_with_the_flow_image_fix(profile: Profile):
    (issue,) = start_issues(profile, POD)  # image: auto -> Cloud Build, which is reachable
    assert issue.field == "stage infra" and "gcloud" in issue.problem
    assert "CLOUD_TOOLS=1" in issue.fix and "process work pool" in issue.fix
    assert issue.category == "environment/no-gcloud"


def test_builder_docker_without_a_daemon_names_cloud_build(profile: Profile):
    pod = dataclasses.replace(POD, on_path=frozenset({"gcloud"}))
    (issue,) = start_issues(with_builder(profile, "docker"), pod)
    assert issue.field == "image.builder" and "no Docker daemon" in issue.problem
    assert "image.builder: cloud-build" in issue.fix


def test_auto_without_daemon_or_google_credentials_says_both_ways(profile: Profile):
    laptop = dataclasses.replace(READY, docker_daemon=False,
                                 cloud_build_credentials="no Google credentials for Cloud Build")
    (issue,) = start_issues(profile, laptop)
    assert "auto chose Cloud Build" in issue.problem
    assert "application-default login" in issue.fix and "image.builder: docker" in issue.fix


def test_missing_infra_credentials_are_named(profile: Profile):
    issues = start_issues(profile, dataclasses.replace(READY, infra_credentials="no creds"))
    assert [i.category for i in issues] == ["environment/no-google-credentials"]


def test_the_refusal_lists_every_issue_with_its_fix(profile: Profile):
    error = EnvironmentNotReady(profile.name, start_issues(with_builder(profile, "docker"), POD))
    text = str(error)
    assert "cannot run every stage (2 problem(s)); nothing was started" in text
    assert text.count("fix:") == 2
