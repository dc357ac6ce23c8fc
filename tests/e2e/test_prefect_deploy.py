"""`prefect deploy`, event-triggered retraining and the run page, against a real server.

The retraining deployment is driven the way users drive it: the announce-rehearsal block of
docs/how-to/announce.md, run as written, makes a dataset version and posts its event; the event runs the
dispatcher, which creates a retrain run with the announced dataset; a process worker runs
the rehearsal to the end. Announcements made during that run (an intermediate dataset, then
the newest) give exactly one follow-up run serving the newest, the intermediate recorded as
coalesced (a cancelled waiting run with the message) or superseded. The newest re-announces
the first run's file, so the follow-up skips every stage. (A revision's coalescing is
tests/announcements/test_dispatch.py's: on the rehearsal a new revision reruns every stage.)
The server and deployments are those the deployment page's walkthrough made in this session
(tests/support/page_deployment.py, one `prefect deploy --all`), with its runs on them.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from flows.common.event_catalogue import MODEL_PROMOTED
from flows.common.paths import REPO_ROOT
from flows.config import load_profile
from flows.stages import stages_for
from tests.support.page_deployment import Walkthrough
from tests.support.prefect_server import PREFECT, PrefectServer, wait_until
from tests.support.process_group import stop_group
from tests.support.readme import blocks
from tests.support.run_events import bookkeeping_share, run_events
from tests.support.webhook_receiver import Receiver, webhook_receiver

pytestmark = pytest.mark.rehearsal
OUTPUTS = REPO_ROOT / ".tpurl" / "test-outputs"
DEPLOYMENTS = {"rehearsal", "retrain-rehearsal", "announce-retrain-rehearsal",
               "qwen3-30b-a3b-v6e-32-weekly", "qwen3-30b-a3b-v6e-32-retrain",
               "announce-qwen3-30b-a3b-v6e-32-retrain", "teardown-qwen3-30b-a3b-v6e-32",
               "rollback-qwen3-30b-a3b-v6e-32", "rollback-rehearsal", "watch-rehearsal"}
FINAL = ("COMPLETED", "FAILED", "CRASHED", "CANCELLED")


@pytest.fixture(scope="module")
def prefect_server(walkthrough: Walkthrough) -> PrefectServer:
    """The server the deployment page deployed to (tests/e2e/conftest.py): the work pools and
    every deployment of prefect.yaml, the flow image built and pushed once per session."""
    return walkthrough.server


@pytest.fixture(scope="module")
def deployed(walkthrough: Walkthrough) -> dict[str, dict]:
    return walkthrough.deployments


ANNOUNCED = REPO_ROOT / ".tpurl" / "announced"  # the docs' block writes here


def _announce_as_the_readme_does(server: PrefectServer, rehearsal_image) -> Path:
    """docs/how-to/announce.md's announce-rehearsal block, as written (the rehearsal venv it calls is the
    one the session built)."""
    assert rehearsal_image.venv_dir() == REPO_ROOT / ".venvs" / "rehearsal"
    block = blocks("how-to/announce.md")["announce-rehearsal"]
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=REPO_ROOT,
                          env=server.env, text=True, capture_output=True, timeout=600,
                          check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "announced dataset file://" in done.stdout, done.stdout
    return ANNOUNCED / "openmath-v2.parquet"


def _emit(server: PrefectServer, event: str, resource: str, payload: dict,
          occurred: datetime | None = None) -> str:
    """An announcement addressed to the rehearsal profile (its `tpurl.profile` label)."""
    event_id = str(uuid.uuid4())
    server.api("POST", "/events", json=[{
        "id": event_id, "occurred": (occurred or datetime.now(UTC)).isoformat(),
        "event": event, "resource": {"prefect.resource.id": resource, "tpurl.profile": "rehearsal"},
        "payload": payload}])
    return event_id


def _runs(server: PrefectServer, deployment_id: str) -> list[dict]:
    return server.api("POST", "/flow_runs/filter", json={
        "flow_runs": {"deployment_id": {"any_": [deployment_id]}},
        "sort": "EXPECTED_START_TIME_ASC"}).json()




def test_deploy_all_creates_every_deployment_with_schedule_and_triggers(deployed, prefect_server):
    assert set(deployed) >= DEPLOYMENTS
    weekly = deployed["qwen3-30b-a3b-v6e-32-weekly"]
    assert weekly["schedules"][0]["schedule"]["cron"] == "0 6 * * 1"
    assert weekly["work_pool_name"] == "tpurl-kubernetes-tutorial"  # its team's pool
    assert weekly["concurrency_limit"] == 1 or weekly.get("global_concurrency_limit")
    for name in ("retrain-rehearsal", "qwen3-30b-a3b-v6e-32-retrain"):
        assert deployed[name]["concurrency_options"]["collision_strategy"] == "ENQUEUE", name
        assert deployed[f"announce-{name}"]["work_pool_name"] == deployed[name]["work_pool_name"]
        assert not deployed[f"announce-{name}"].get("global_concurrency_limit")
    automations = prefect_server.api("POST", "/automations/filter", json={}).json()
    expects = {e for a in automations for e in a["trigger"].get("expect", [])}
    assert {"tpurl.dataset.updated", "tpurl.base-model.updated"} <= expects
    dispatchers = {deployed[n]["id"] for n in DEPLOYMENTS if n.startswith("announce-")}
    rollbacks = {deployed[n]["id"] for n in DEPLOYMENTS if n.startswith("rollback-")}
    targets = {action.get("deployment_id") for a in automations for action in a["actions"]}
    assert targets <= dispatchers | rollbacks, "a trigger starts something other than a " \
        "dispatcher or a rollback"
    # the rollback's trigger ships disabled: an operator turns it on (docs/how-to/rollback.md)
    for automation in automations:
        if {action.get("deployment_id") for action in automation["actions"]} & rollbacks:
            assert automation["enabled"] is False, automation["name"]


@pytest.fixture(scope="module")
def webhook(prefect_server: PrefectServer) -> Iterator[Receiver]:
    """The rehearsal profile's notifications to a local receiver: a custom-webhook block and
    the notify step as a deployment's `notify:` would run it (flows/notifications/apply.py)."""
    with webhook_receiver() as receiver:
        code = f"""
from prefect.blocks.notifications import CustomWebhookNotificationBlock
from flows.notifications.apply import notification_automations
CustomWebhookNotificationBlock(name="e2e", url={receiver.url!r},
    json_data={{"subject": "{{{{subject}}}}", "text": "{{{{body}}}}"}}).save("tpurl-e2e")
notification_automations("rehearsal", {{"block": "custom-webhook/tpurl-e2e"}})
"""
        done = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT,
                              env=prefect_server.env, text=True, capture_output=True,
                              timeout=300, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
        yield receiver


def test_announcements_during_a_run_give_one_follow_up_on_the_newest(
        deployed, prefect_server, rehearsal_image, webhook):
    retrain, dispatcher = deployed["retrain-rehearsal"], deployed["announce-retrain-rehearsal"]
    state = lambda run_id: prefect_server.api("GET", f"/flow_runs/{run_id}").json()["state"]  # noqa: E731
    worker = subprocess.Popen([PREFECT, "worker", "start", "--pool", "tpurl-process"],
                              cwd=REPO_ROOT, env=prefect_server.env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        new_dataset = _announce_as_the_readme_does(prefect_server, rehearsal_image)
        uri = f"file://{new_dataset}"
        try:
            runs = wait_until(lambda: _runs(prefect_server, retrain["id"]), 180,
                         "the dispatcher's retrain run")
        except AssertionError as exc:
            raise AssertionError(f"{exc}: {_dispatcher_report(prefect_server, dispatcher)}"
                                 ) from None
        assert len(runs) == 1
        first = runs[0]
        assert first["parameters"]["dataset_uri"] == uri
        first_event = first["parameters"]["announcement"]["serves"]["dataset"]["event_id"]
        wait_until(lambda: state(first["id"])["type"] == "RUNNING", 300, "the first run to start")

        # During the run: an intermediate dataset, then the newest (the first run's file,
        # announced again), so the follow-up skips every stage.
        now = datetime.now(UTC)
        intermediate = _emit(prefect_server, "tpurl.dataset.updated", "tpurl.dataset.openmath",
                             {"uri": f"file://{ANNOUNCED}/openmath-v3.parquet"},
                             now + timedelta(seconds=1))
        newest = _emit(prefect_server, "tpurl.dataset.updated", "tpurl.dataset.openmath",
                       {"uri": uri}, now + timedelta(seconds=3))
        finished = lambda: [r for r in _runs(prefect_server, dispatcher["id"])  # noqa: E731
                            if r["state"]["type"] in FINAL]
        done = wait_until(lambda: len(finished()) == 3 and finished(), 600, "the three dispatchers")
        # a dispatcher that had not started when another decided its announcement with its
        # own (flows/announcements/pending.py) is cancelled, never started
        assert all(r["state"]["type"] == "COMPLETED" or (
            r["state"]["type"] == "CANCELLED"
            and r["state"]["message"].startswith("Decided by dispatcher run ")) for r in done), \
            [r["state"] for r in done]
        assert state(first["id"])["type"] == "RUNNING", "the running run was disturbed"

        others = [r for r in _runs(prefect_server, retrain["id"]) if r["id"] != first["id"]]
        live = [r for r in others if r["state"]["type"] != "CANCELLED"]
        assert len(live) == 1, [(r["name"], r["state"]) for r in others]
        follow = live[0]
        record = follow["parameters"]["announcement"]
        assert record["serves"]["dataset"]["event_id"] == newest
        assert follow["parameters"]["dataset_uri"] == uri
        for cancelled in (r for r in others if r["state"]["type"] == "CANCELLED"):
            assert cancelled["state"]["message"].startswith("Coalesced into "), cancelled
        # the dispatchers' events reach the API asynchronously, after their runs complete
        def decided() -> dict[str, set[str]] | None:
            # every dispatcher emits its own decision, in whatever order the lock let them
            # in (the intermediate is superseded when the newest got the lock first), so
            # wait for all three, not only for the newest
            found = _announcement_events(prefect_server)
            seen = set().union(*found.values())
            announced = {first_event, intermediate, newest}
            return found if newest in found["queued"] and announced <= seen else None

        decisions = wait_until(decided, 60, "the dispatchers' events")
        coalesced = {c["event_id"] for c in record["coalesced"]}
        assert intermediate in coalesced or intermediate in decisions["superseded"], decisions
        assert newest in decisions["queued"]

        final = wait_until(lambda: state(first["id"])["type"] if state(first["id"])["type"] in FINAL
                      else None, 1800, "the retraining run")
        assert final == "COMPLETED", state(first["id"])
        follow_final = wait_until(lambda: state(follow["id"])["type"] if state(follow["id"])[
            "type"] in FINAL else None, 1800, "the follow-up run")  # trains and evaluates
        assert follow_final == "COMPLETED", state(follow["id"])
    finally:
        stop_group(worker)
    _check_follow_up_page(prefect_server, follow["id"], newest)
    # its name now: the flow renames a run when it starts (pipeline._run_name)
    _check_one_decision_message(
        webhook, prefect_server.api("GET", f"/flow_runs/{first['id']}").json()["name"])
    _check_bookkeeping_share(prefect_server, first["id"])
    _check_run_page(prefect_server, first["id"])


def _check_one_decision_message(receiver: Receiver, run_name: str) -> None:
    """The trained-and-evaluated run's promotion decision sends exactly one
    message, with its scores (the intermediate announcement's coalescing may send its own)."""
    def mine() -> list[dict]:
        return [r.json() for r in receiver.snapshot()
                if f"Model of run {run_name} " in r.json()["text"]]
    wait_until(mine, 90, "the promotion decision's message")
    time.sleep(8)  # time for a duplicate to arrive, if there were one
    found = mine()
    assert len(found) == 1, found
    assert found[0]["subject"] in ("tpurl rehearsal: model promoted",
                                   "tpurl rehearsal: model rejected"), found
    assert "mean_reward: trained " in found[0]["text"] and ", base " in found[0]["text"]


def _check_bookkeeping_share(server: PrefectServer, run_id: str) -> None:
    """The bookkeeping a deployment's rehearsal run adds to its event feed
    (tests/support/run_events.py counts it; benchmarks/run_events.py prints the same figures)
    stays bounded: at most 7 artifact-collection events (the keyed artifacts: stage table,
    export, metrics, evaluation, history, recipe), whatever the run's length. The lock's events are
    printed, not bounded (a count over the run's minutes would take in every concurrency
    limit's events: the three dispatchers run meanwhile acquire and release their own;
    tests/support/run_events.py counts this run's only). The time-driven bookkeeping is one
    Prefect heartbeat an hour (prefect.yaml's env, flows/flow_runs/heartbeat.py) and one lock
    beat an hour (flows/locking/lock_rules.py): benchmarks/run_events.py measured the goal of
    under a quarter met (see its docstring); here the share is printed, not asserted, until
    this test has measured it too."""
    events = run_events(server.url, run_id)
    share, counts = bookkeeping_share(events)
    assert counts["pipeline"] and counts["run state"], counts
    run = server.api("GET", f"/flow_runs/{run_id}").json()
    print(f"bookkeeping: {share:.0%} of {len(events)} events over a run of "
          f"{run['total_run_time']:.0f} s: {dict(counts)}")
    # seven keyed artifacts (the recipe's among them: flows/runpage/artifacts.py
    # publish_recipe), and the promoted-history table once a model was promoted (it depends
    # on the scores: flows/runpage/promotion.py publish_promotion)
    promoted = any(e["event"] == MODEL_PROMOTED.name for e in events)
    assert counts["artifact"] <= 7 + promoted, (
        f"{counts}: more artifact events than the keyed artifacts make; "
        f"{sorted(e['event'] for e in events)}")


def _dispatcher_report(server: PrefectServer, dispatcher: dict) -> str:
    """What became of the dispatcher's runs, with their logs, for a failure message."""
    runs = _runs(server, dispatcher["id"])
    lines = [f"{len(runs)} dispatcher runs"]
    for run in runs:
        lines.append(f"{run['name']}: {run['state']['type']} {run['state'].get('message')}")
        logs = server.api("POST", "/logs/filter", json={"logs": {"flow_run_id": {
            "any_": [run["id"]]}}, "limit": 30}).json()
        lines += [f"  {log['message'][:400]}" for log in logs]
    return "\n".join(lines)


def _announcement_events(server: PrefectServer) -> dict[str, set[str]]:
    # 50 is the most /events/filter returns per page (prefect/server/api/events.py: limit
    # le=INTERACTIVE_PAGE_SIZE); a larger limit is a 422
    found = server.api("POST", "/events/filter", json={"limit": 50, "filter": {
        "event": {"prefix": ["tpurl.announcement."]}}}).json()["events"]
    out: dict[str, set[str]] = {"queued": set(), "coalesced": set(), "superseded": set(),
                                "duplicate": set(), "dropped": set()}
    for event in found:
        out[event["event"].rsplit(".", 1)[-1]].add(event["payload"]["event_id"])
    return out


def _check_follow_up_page(server: PrefectServer, run_id: str, newest: str) -> None:
    """The follow-up's page and events say which announcements it serves."""
    def announcement_artifact() -> list[dict]:
        return [a for a in server.api("POST", "/artifacts/filter", json={
            "artifacts": {"flow_run_id": {"any_": [run_id]}}}).json()
            if a["key"] == "tpurl-rehearsal-announcement"]

    (artifact,) = wait_until(announcement_artifact, 60, "the follow-up's announcement artifact")
    assert newest in artifact["data"]

    def started() -> list[dict]:
        return server.api("POST", "/events/filter", json={"limit": 10, "filter": {
            "event": {"name": ["tpurl.run.started"]},
            "related": {"resources_in_roles": [[f"prefect.flow-run.{run_id}", "flow-run"]]}}}
        ).json()["events"]

    (event,) = wait_until(started, 60, "the follow-up's tpurl.run.started event")
    assert event["payload"]["announcement"]["dataset_event"] == newest


def _check_run_page(server: PrefectServer, run_id: str) -> None:
    wanted = {"tpurl-rehearsal-stages", "tpurl-rehearsal-metrics",
              "tpurl-rehearsal-retrain-rehearsal-hf-export"}  # latest per deployment

    def artifacts_of_run() -> list[dict]:
        found = server.api("POST", "/artifacts/filter", json={
            "artifacts": {"flow_run_id": {"any_": [run_id]}}}).json()
        return found if wanted <= {a["key"] for a in found if a["key"]} else []

    try:
        artifacts = wait_until(artifacts_of_run, 60, "the run's artifacts")
    except AssertionError:
        artifacts = server.api("POST", "/artifacts/filter", json={
            "artifacts": {"flow_run_id": {"any_": [run_id]}}}).json()
    keys = {a["key"] for a in artifacts if a["key"]}
    assert wanted <= keys, keys
    stages = next(a for a in artifacts if a["key"] == "tpurl-rehearsal-stages")
    table = stages["data"] if isinstance(stages["data"], list) else json.loads(stages["data"])
    # every stage the profile runs (the rehearsal's evaluates after export)
    assert [row["stage"] for row in table] == [
        stage.name for stage in stages_for(load_profile("rehearsal"))], table
    assert any(a["type"] == "progress" for a in artifacts)
    def event_names() -> set[str]:  # events reach the API asynchronously
        found = server.api("POST", "/events/filter", json={"limit": 50, "filter": {
            "event": {"prefix": ["tpurl."]},
            "related": {"resources_in_roles": [[f"prefect.flow-run.{run_id}", "flow-run"]]}}}
        ).json()
        names = {e["event"] for e in found["events"]}
        return names if {"tpurl.stage.started", "tpurl.model.exported"} <= names else set()

    assert wait_until(event_names, 60, "the run's tpurl events")
    _screenshot(server, run_id, stages["id"])


def _screenshot(server: PrefectServer, run_id: str, stages_id: str) -> None:
    """The run page and the stage table as a user sees them, kept under .tpurl/test-outputs."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("chromium is not installed (.ci/run installs it); no run-page screenshot")
    OUTPUTS.mkdir(parents=True, exist_ok=True)
    ui = server.url.removesuffix("/api")
    for name, page in (("run-page.png", f"runs/flow-run/{run_id}"),
                       ("stage-table.png", f"artifacts/artifact/{stages_id}")):
        target = OUTPUTS / name
        subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                        "--no-first-run", "--disable-background-networking",
                        "--disable-component-update", "--disable-sync",
                        f"--user-data-dir={OUTPUTS / 'chromium-profile'}", "--hide-scrollbars",
                        "--window-size=1600,1400", "--virtual-time-budget=20000",
                        f"--screenshot={target}", f"{ui}/{page}"],
                       check=True, timeout=120, capture_output=True)
        assert target.stat().st_size > 10_000, name
