"""Every way a retrain run can end without training, against a real Prefect API (the test
session's server, its orchestration rules deciding each transition): the announcement it
held stays due, the next dispatch trains it, an older one is never superseded by it, and only
`tpurl announcements drop` gives it up. Then what a target refuses at dispatch: a URI its
backend cannot read, one outside the profile's allowed prefixes, a revision that is no commit.

The endings are the states Prefect itself sets: a cancel of a queued run is Cancelled before
it starts; a cancel during training Cancelling then Cancelled (the worker's kill); a crash
Crashed; a failure Failed; a flow timeout Failed named "TimedOut" (prefect 3.9.1
prefect/flow_engine.py:886, `Failed(..., name="TimedOut")`)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from uuid import UUID

import pytest
import yaml
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
from prefect.logging.handlers import APILogWorker
from prefect.states import Cancelled, Cancelling, Crashed, Failed, Pending, Running, State

from flows.announcements.dispatch import dispatch_announcement
from flows.cli import main as tpurl
from flows.common.paths import PROFILES_DIR, REPO_ROOT
from tests.support.announcements import (
    REV,
    T0,
    announce,
    ds,
    make_target,
    runs_of,
)
from tests.support.readme import json_block

pytestmark = pytest.mark.usefixtures("prefect_api")

ENDINGS: dict[str, list[State]] = {
    "cancel-while-queued": [Cancelled(message="cancelled by a user")],
    "cancel-during-train": [Pending(), Running(), Cancelling(), Cancelled()],
    "crash": [Pending(), Running(), Crashed(message="Crash detected!")],
    "failure": [Pending(), Running(), Failed(message="train failed")],
    "timeout": [Pending(), Running(), Failed(message="Flow run exceeded timeout of 60 "
                                                     "second(s)", name="TimedOut")],
}


def _end(run_id: str, states: list[State]) -> str:
    with get_client(sync_client=True) as client:
        for state in states:
            client.set_flow_run_state(UUID(run_id), state, force=False)
        return client.read_flow_run(UUID(run_id)).state.name


def _logs(run_id: object) -> list[str]:
    APILogWorker.drain_all(timeout=10)
    with get_client(sync_client=True) as client:
        return [e.message for e in client.read_logs(log_filter=LogFilter(
            flow_run_id=LogFilterFlowRunId(any_=[UUID(str(run_id))])))]


@pytest.mark.parametrize("ending", list(ENDINGS))
def test_an_announcement_whose_run_did_not_train_it_stays_due_and_is_trained_next(
        target, ending):
    deployment, deployment_id = target
    v9, first = announce(deployment, "dataset", ds("v9.parquet"), 9)
    ended_as = _end(first["run"], ENDINGS[ending])
    assert ended_as in {"Cancelled", "Crashed", "Failed", "TimedOut"}, ended_as

    # an older announcement arriving later is not superseded "by" v9, which never trained
    state = dispatch_announcement(deployment=deployment, kind="dataset",
                                  value=ds("v8.parquet"), event_id=str(uuid.uuid4()),
                                  occurred=str(T0.replace(minute=8)), return_state=True)
    result = state.result()
    assert result["decision"] == "queued" and result["retried"] == [v9], result
    [follow] = [r for r in runs_of(deployment_id) if str(r.id) == result["run"]]
    assert follow.parameters["dataset_uri"] == ds("v9.parquet")
    assert [c["value"] for c in follow.parameters["announcement"]["coalesced"]] == [
        ds("v8.parquet")]
    said = "\n".join(_logs(state.state_details.flow_run_id))
    assert "rule queued:" in said and f"ended {ended_as} without training it" in said, said


def test_due_lists_it_and_only_drop_gives_it_up(target, capsys):
    deployment, deployment_id = target
    v9, first = announce(deployment, "dataset", ds("v9.parquet"), 9)
    assert tpurl(["announcements", "drop", deployment, v9]) == 2  # waiting: not due
    assert "holds it: cancel that run" in capsys.readouterr().err
    _end(first["run"], ENDINGS["crash"])
    assert tpurl(["announcements", "due", deployment]) == 0
    listed = capsys.readouterr().out
    assert "ended Crashed without training it" in listed and v9 in listed
    assert tpurl(["announcements", "drop", deployment, v9]) == 0
    assert "dropped dataset" in capsys.readouterr().out
    with get_client(sync_client=True) as client:
        assert f"tpurl-dropped:{v9}" in client.read_flow_run(UUID(first["run"])).tags
    assert tpurl(["announcements", "due", deployment]) == 0
    assert "nothing is due" in capsys.readouterr().out
    _, again = announce(deployment, "dataset", ds("v9.parquet"), 9)  # its retry, a new id
    assert again["decision"] == "dropped"
    _, older = announce(deployment, "dataset", ds("v8.parquet"), 8)
    assert older["decision"] == "queued" and older["retried"] == []
    assert len(runs_of(deployment_id)) == 2


def test_a_retry_under_a_new_id_is_the_same_announcement(target):
    deployment, deployment_id = target
    _, first = announce(deployment, "dataset", ds("v2.parquet"), 2)
    _, retry = announce(deployment, "dataset", ds("v2.parquet"), 2)  # same uri and occurred
    assert retry == {"decision": "duplicate", "run": first["run"]}
    assert len(runs_of(deployment_id)) == 1


def _refused(deployment: str, kind: str, value: str) -> str:
    state = dispatch_announcement(deployment=deployment, kind=kind, value=value,
                                  event_id=str(uuid.uuid4()), occurred=str(T0),
                                  return_state=True)
    assert state.is_failed(), state
    return state.message or ""


@pytest.mark.parametrize(("value", "says"), [
    ("gs://BUCKET/data/openmath-v7.parquet", "is a gs:// URI, which the target profile "
     "rehearsal (backend local) cannot read; fix: announce a local parquet file"),
    ("hf://datasets/evil/x/train.parquet", "is a hf:// URI"),
    ("/etc/passwd", "under no prefix the profile rehearsal allows"),
    (ds("../../../etc/x.parquet"), "has a '..' segment"),
    ("relative/x.parquet", "is a relative path"),
    (ds("v2.parquet") + "\n[x](http://evil)", "control characters")])
def test_the_rehearsal_refuses_what_it_cannot_or_may_not_read(target, value, says):
    deployment, deployment_id = target
    assert says in _refused(deployment, "dataset", value)
    assert runs_of(deployment_id) == []  # refused before any run was made


@pytest.mark.parametrize("revision", ["refs/pr/1", "main", REV[:12]])
def test_a_revision_that_is_no_commit_is_refused(target, revision):
    deployment, deployment_id = target
    assert "is not a commit; fix: announce the full 40-hex commit id" in _refused(
        deployment, "base-model", revision)
    assert runs_of(deployment_id) == []


@pytest.fixture
def gke_profile(tmp_path: Path, tutorial_overrides: dict[str, str]) -> Path:
    """The tutorial profile with its required fields and one allowed prefix."""
    raw = yaml.safe_load((PROFILES_DIR / "qwen3-30b-a3b-v6e-32.yaml").read_text())
    for dotted, value in tutorial_overrides.items():
        section, key = dotted.split(".")
        raw.setdefault(section, {})[key] = value
    raw["announcements"] = {"allowed_uri_prefixes": ["gs://tpurl-data/openmath/"]}
    path = tmp_path / "qwen3-30b-a3b-v6e-32.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_a_gke_target_queues_its_bucket_and_refuses_the_rest(gke_profile):
    deployment, deployment_id = make_target({"profile": str(gke_profile)})
    _, queued = announce(deployment, "dataset", "gs://tpurl-data/openmath/v7.parquet", 7)
    _, revision = announce(deployment, "base-model", REV, 8)
    [run] = [r for r in runs_of(deployment_id) if str(r.id) == revision["run"]]
    assert run.parameters["dataset_uri"] == "gs://tpurl-data/openmath/v7.parquet"
    assert run.parameters["model_revision"] == REV
    assert run.parameters["profile"] == str(gke_profile)
    assert queued["decision"] == "queued"
    assert "is a file:// URI, which the target profile qwen3-30b-a3b-v6e-32 (backend gke) " \
           "cannot read; fix: announce a parquet object the node pool can read" in _refused(
               deployment, "dataset", ds("v2.parquet"))
    assert "under no prefix" in _refused(deployment, "dataset",
                                         "gs://tpurl-data-evil/openmath/v7.parquet")
    assert "under no prefix" in _refused(deployment, "dataset", "hf://datasets/a/b/x.parquet")


def test_the_shipped_tutorial_profile_allows_no_prefix_until_one_is_added(
        tutorial_overrides):
    deployment, _ = make_target({"profile": "qwen3-30b-a3b-v6e-32",
                                 "overrides": tutorial_overrides})
    message = _refused(deployment, "dataset", "gs://b/data/v7.parquet")
    assert "announcements.allowed_uri_prefixes: none (the default)" in message
    assert "add the directory it publishes to" in message and "gs://b/data/" in message


def test_the_docs_gke_example_queues_a_run_of_its_target(tutorial_overrides, tmp_path):
    """The JSON announcement of docs/how-to/announce.md, dispatched as its trigger would
    (payload uri, id, occurred) to the tutorial's target once the profile allows
    gs://BUCKET/data/ as the page says: the run it queues trains that object on the tutorial's profile."""
    [event] = json.loads(json_block("announce-dataset", "how-to/announce.md"))
    assert event["resource"]["tpurl.profile"] == "qwen3-30b-a3b-v6e-32"
    raw = yaml.safe_load((PROFILES_DIR / "qwen3-30b-a3b-v6e-32.yaml").read_text())
    raw["announcements"] = {"allowed_uri_prefixes": ["gs://BUCKET/data/"]}
    profile = tmp_path / "qwen3-30b-a3b-v6e-32.yaml"
    profile.write_text(yaml.safe_dump(raw))
    deployment, deployment_id = make_target({"profile": str(profile),
                                             "overrides": tutorial_overrides})
    result = dispatch_announcement(deployment=deployment, kind="dataset",
                                   value=event["payload"]["uri"], event_id=event["id"],
                                   occurred=event["occurred"])
    assert result["decision"] == "queued"
    [run] = runs_of(deployment_id)
    assert run.parameters["dataset_uri"] == "gs://BUCKET/data/openmath-v7.parquet"
    assert run.parameters["announcement"]["serves"]["dataset"]["event_id"] == event["id"]
    assert run.parameters["overrides"] == tutorial_overrides  # the deployment's kept
    assert run.name.startswith("qwen3-30b-a3b-v6e-32-openmath-v7.parquet")


def test_an_unknown_deployment_is_refused_naming_the_form_and_a_shipped_example(target, capsys):
    """`tpurl announcements due|drop` given a name no deployment has: exit 2, the name quoted
    and the fix's example a real one (the pipeline's flow and a retrain deployment of
    prefect.yaml), before anything is read or tagged."""
    from flows.pipeline import rl_post_training

    deployment, _ = target
    missing = f"{deployment}-gone"
    for argv in (["announcements", "due", missing], ["announcements", "drop", missing, "e-1"]):
        assert tpurl(argv) == 2
        said = capsys.readouterr().err
        assert f"deployment {missing!r} does not exist" in said, said
    example = said.rsplit("e.g. ", 1)[1].strip()
    flow_name, name = example.split("/")
    assert flow_name == rl_post_training.name
    shipped = yaml.safe_load((REPO_ROOT / "prefect.yaml").read_text())
    assert name in {d["name"] for d in shipped["deployments"]} and name.startswith("retrain-")
