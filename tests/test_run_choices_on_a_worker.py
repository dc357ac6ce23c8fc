"""A run created through the Prefect API chooses nothing that runs on a process worker.

Against one real `prefect server start` and real process workers, with prefect.yaml's
`rehearsal` and teardown deployments deployed as the docs deploy them:

- on a pool made with Prefect's default process template (what `prefect work-pool create`
  makes without a template),
  a run's ``command`` job variable runs as the worker's user: the attack is real;
- on `tpurl-process` made with deployments/work-pool/process-base-job-template.json, the API
  refuses at creation a run naming ``command``, ``working_dir`` or an env name the template
  does not list (prefect/server/api/validation.py
  ``validate_job_variables_for_deployment_flow_run``, prefect 3.9.1), so no run exists and
  nothing runs;
- a listed env name given its own value, or another ``profile``, reaches the worker (Prefect
  cannot tell a run's variables from its deployment's), and the flow refuses the run naming
  it before it loads the profile (flows/deployed/run_choices.py);
- the watch deployment's run choosing another profile (and so another team's champion to
  judge and roll back) is refused the same way;
- a run that chooses nothing, or repeats its deployment's own values, goes on to the
  profile's own validation (the teardown, as shipped, lacks its GKE fields);
- two teams' rollback deployments (prefect.yaml's, one per team's profile) and the shipped
  regression trigger: a regression event naming no run or another team's model, and a run
  choosing another profile, target, env or ``by``, roll nothing back; the champion's own
  regression rolls back one promotion, recorded as the automation that created the run;
- a watch (flows/operations/watch.py, run here with constructed scores) of a champion worse
  on the team's own set than the model it replaced posts the regression, the automation's
  rollback run restores that model and announces the held dataset again, the dataset
  trigger's dispatcher run leaves one waiting retrain run serving it, and a watch of the
  restored model then posts nothing.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from flows.common.paths import REPO_ROOT
from tests.support.prefect_server import (
    PREFECT,
    QUICK_POLLING,
    RETRYABLE,
    PrefectServer,
    prefect_server_in,
    wait_until,
)
from tests.support.process_group import stop_group

pytestmark = [pytest.mark.services, pytest.mark.realtime]

TEMPLATE = REPO_ROOT / "deployments/work-pool/process-base-job-template.json"
TEARDOWN = "teardown-qwen3-30b-a3b-v6e-32"
ROLLBACK = "rollback-qwen3-30b-a3b-v6e-32"
WATCH = "watch-rehearsal"
FINAL = ("COMPLETED", "FAILED", "CRASHED", "CANCELLED")


def _worker(server: PrefectServer, pool: str, log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen([PREFECT, "worker", "start", "--pool", pool], cwd=REPO_ROOT,
                                env=server.env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    home = tmp_path_factory.mktemp("prefect-home")
    with prefect_server_in(home, settings=QUICK_POLLING) as server:
        server.create_pool("tpurl-process", "process", TEMPLATE)
        server.create_pool("stock-process", "process")  # Prefect's default template
        done = server.cli("--no-prompt", "deploy", "--name", "rehearsal", "--name", TEARDOWN,
                          "--name", ROLLBACK, "--name", WATCH)
        assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
        deployments = {d["name"]: d for d in server.api("POST", "/deployments/filter",
                                                        json={}).json()}
        flow_id = deployments["rehearsal"]["flow_id"]
        default = server.api("POST", "/deployments/", json={
            "name": "on-the-default-template", "flow_id": flow_id,
            "work_pool_name": "stock-process",
            "entrypoint": deployments["rehearsal"]["entrypoint"],
            "pull_steps": deployments["rehearsal"]["pull_steps"],
            "parameters": {"profile": "rehearsal"}}).json()
        worker = _worker(server, "tpurl-process", home / "worker.log")
        try:
            yield {"server": server, "home": home, "default": default, **deployments}
        finally:
            stop_group(worker)


def _create(world: dict[str, Any], name: str, **body: Any) -> httpx.Response:
    """The API's answer, 422 included (``PrefectServer.api`` raises on it), retried as
    Prefect's client retries a busy server (tests/support/prefect_server.py)."""
    server: PrefectServer = world["server"]
    for attempt in range(6):
        answer = httpx.post(f"{server.url}/deployments/{world[name]['id']}/create_flow_run",
                            json=body, timeout=30)
        if answer.status_code not in RETRYABLE:
            break
        time.sleep(2 ** attempt)
    return answer


def _final(world: dict[str, Any], run_id: str) -> dict[str, Any]:
    server: PrefectServer = world["server"]
    return wait_until(lambda: (s := server.api("GET", f"/flow_runs/{run_id}").json()["state"])[
        "type"] in FINAL and s, 300, f"flow run {run_id} to end")


def _logs(world: dict[str, Any], run_id: str) -> str:
    server: PrefectServer = world["server"]
    found = server.api("POST", "/logs/filter", json={
        "logs": {"flow_run_id": {"any_": [run_id]}}, "limit": 200}).json()
    return "\n".join(entry["message"] for entry in found)


def _logs_once_they_hold(world: dict[str, Any], run_id: str, text: str,
                         timeout_s: float = 60.0) -> str:
    """The run's logs once ``text`` is among them (or as they are after ``timeout_s``): the
    flow process ships its last records to the API as it exits, which can be after the API
    already shows the run's final state."""
    deadline = time.monotonic() + timeout_s
    logs = _logs(world, run_id)
    while text not in logs and time.monotonic() < deadline:
        time.sleep(0.5)
        logs = _logs(world, run_id)
    return logs


def test_prefects_default_template_runs_a_runs_command_on_the_worker(world, tmp_path):
    """The attack, on a pool of Prefect's default process template: the marker is written by the
    worker's child, as the worker's user, with the worker's environment."""
    marker = tmp_path / "ran"
    run = _create(world, "default", job_variables={
        "command": f"sh -c 'env > {marker}.env; id > {marker}'"})
    assert run.status_code == 201, run.text
    log = world["home"] / "default-worker.log"
    # this pool's worker serves this test alone: started for it, so it polls for no other
    worker = _worker(world["server"], "stock-process", log)
    try:
        # the command is no engine: the run's state is never reported, the marker is the proof
        wait_until(lambda: marker.is_file() and marker.read_text(), 300,
                   f"the run's command on the worker ({log.read_text()[-2000:]})")
    finally:
        stop_group(worker)
    assert "uid=" in marker.read_text()
    assert "PREFECT_API_URL=" in Path(f"{marker}.env").read_text()


@pytest.mark.parametrize("variables", [
    {"command": "sh -c 'id > MARKER'"},
    {"working_dir": "/tmp"},
    {"env": {"PYTHONPATH": "MARKER"}},
    {"env": {"PREFECT_API_URL": "http://127.0.0.1:9/api"}},
    {"env": {"HF_TOKEN": "hf_" + "x" * 34}},
    {"env": {"TPURL_IMAGE__BASE": "attacker/image:latest"}},
    {"env": {"TPURL_MODEL__HF_TOKEN__SECRET_BLOCK": "theirs"}},
    {"env": {"TPURL_CACHE_DIR": "MARKER"}},
    {"cluster_config": {"config": {}, "context_name": "x"}},
], ids=lambda v: next(iter(v)) + ("." + next(iter(v["env"])) if "env" in v else ""))
def test_the_api_refuses_a_variable_the_pool_does_not_offer(world, tmp_path, variables):
    marker = tmp_path / "ran"
    named = {k: ({n: str(x).replace("MARKER", str(marker)) for n, x in v.items()}
                 if isinstance(v, dict) and k == "env" else
                 str(v).replace("MARKER", str(marker)) if isinstance(v, str) else v)
             for k, v in variables.items()}
    server: PrefectServer = world["server"]
    before = server.api("POST", "/flow_runs/count", json={}).json()
    for name in ("rehearsal", TEARDOWN):
        refused = _create(world, name, job_variables=named)
        assert refused.status_code == 422, refused.text
        assert "Error creating flow run" in refused.text
    assert server.api("POST", "/flow_runs/count", json={}).json() == before
    assert not marker.exists()


# Each deployment's run chooses at once every value it may not: one flow run (a process on
# the worker) per deployment, whose refusal names each choice (flows/deployed/run_choices.py
# lists every one; a single choice's refusal: tests/test_run_choices.py).
@pytest.mark.parametrize(("name", "body", "named"), [
    (TEARDOWN, {"job_variables": {"env": {"TPURL_GKE__CLUSTER": "someone-elses"}},
                "parameters": {"profile": "smoke-qwen3-0.6b-v6e-8"}},
     ["job_variables.env.TPURL_GKE__CLUSTER", "profile"]),
    ("rehearsal", {"job_variables": {"env": {"TPURL_GKE__BUCKET": "theirs",
                                             "PREFECT_FLOWS_HEARTBEAT_FREQUENCY": "60"},
                                     "stream_output": False},
                   "parameters": {"profile": "qwen3-30b-a3b-v6e-32"}},
     ["job_variables.env.TPURL_GKE__BUCKET", "job_variables.env.PREFECT_FLOWS_HEARTBEAT_FREQUENCY",
      "job_variables.stream_output", "profile"]),
    (WATCH, {"parameters": {"profile": "qwen3-30b-a3b-v6e-32"}}, ["profile"]),
], ids=["teardown-cluster-and-profile", "rehearsal-bucket-heartbeat-stream_output-profile",
        "watch-profile"])
def test_the_flow_refuses_a_run_that_chose_its_own_value(world, name, body, named):
    run = _create(world, name, **body)
    assert run.status_code == 201, run.text
    final = _final(world, run.json()["id"])
    logs = _logs_once_they_hold(world, run.json()["id"], "chose what only the deployment may")
    assert final["type"] == "FAILED", final
    for each in named:
        assert f"{each}:" in logs, (each, logs[-3000:])
    assert "chose what only the deployment may" in logs, logs[-3000:]
    # refused before the profile is loaded: nothing validated, locked or started
    assert "validated" not in logs and "is required but not set" not in logs, logs[-3000:]
    for value in ("someone-elses", "theirs"):
        assert value not in logs


@pytest.mark.parametrize("body", [
    {},
    {"job_variables": {"env": {"PREFECT_FLOWS_HEARTBEAT_FREQUENCY": "3600",
                               "TPURL_GKE__CLUSTER": ""}},
     "parameters": {"profile": "qwen3-30b-a3b-v6e-32", "delete_bucket": False}},
], ids=["nothing", "the-deployments-own-env-and-profile"])
def test_a_run_that_repeats_its_deployment_reaches_the_profiles_validation(world, body):
    run = _create(world, TEARDOWN, **body)
    assert run.status_code == 201, run.text
    final = _final(world, run.json()["id"])
    logs = _logs_once_they_hold(world, run.json()["id"], "is required but not set")
    assert final["type"] == "FAILED", final
    assert "chose what only the deployment may" not in logs, logs[-3000:]
    assert "gke.project: is required but not set" in logs, logs[-3000:]


# The rollback deployment, as two teams of one workspace deploy it: prefect.yaml's, with its
# schema, pool and env, for team A's profile and for team B's (files extending the rehearsal,
# each with its own output root), and the regression automation as prefect.yaml ships it
# but enabled and matching as the serving example matches (any tpurl.model.*).

TEAMS = ("team-a", "team-b")


def _team_profile(folder: Path, team: str) -> Path:
    root = folder / team
    root.mkdir(parents=True, exist_ok=True)
    path = folder / f"{team}.yaml"
    path.write_text(f"extends: rehearsal\nname: {team}\nlocal:\n  root: {root}\n")
    return path


def _shipped_trigger_parameters() -> dict[str, Any]:
    import yaml

    config = yaml.safe_load((REPO_ROOT / "prefect.yaml").read_text())
    [deployment] = [d for d in config["deployments"] if d["name"] == ROLLBACK]
    [trigger] = deployment["triggers"]
    # the deployment's own profile, not the shipped one's: the trigger needs none
    return {k: v for k, v in trigger["parameters"].items() if k != "profile"}


@pytest.fixture(scope="module")
def teams(world: dict[str, Any]) -> dict[str, Any]:
    server: PrefectServer = world["server"]
    shipped = world[ROLLBACK]
    folder = world["home"] / "teams"
    found: dict[str, Any] = {"folder": folder}
    for team in TEAMS:
        path = _team_profile(folder, team)
        world[f"rollback-{team}"] = found[team] = server.api("POST", "/deployments/", json={
            "name": f"rollback-{team}", "flow_id": shipped["flow_id"],
            "work_pool_name": "tpurl-process", "entrypoint": shipped["entrypoint"],
            "pull_steps": shipped["pull_steps"],
            "parameter_openapi_schema": shipped["parameter_openapi_schema"],
            "enforce_parameter_schema": shipped["enforce_parameter_schema"],
            "job_variables": shipped["job_variables"],
            "parameters": {"profile": str(path)}}).json()
        found[f"{team}-profile"] = path
    server.api("POST", "/automations/", json={
        "name": "team-a: champion regressed → rollback", "enabled": True,
        "trigger": {"type": "event", "posture": "Reactive",
                    "match": {"prefect.resource.id": "tpurl.model.*"},
                    "expect": ["tpurl.model.regressed"], "threshold": 1, "within": 0},
        "actions": [{"type": "run-deployment", "source": "selected",
                     "deployment_id": found["team-a"]["id"],
                     "parameters": _shipped_trigger_parameters()}]})
    _until_the_automation_fires(world, found["team-a"])
    return found


def _until_the_automation_fires(world: dict[str, Any], deployment: dict[str, Any]) -> None:
    """The triggers service loads a new automation on its next pass (SQLite has no change
    notifications: prefect 3.9.1 server/events/triggers.py ``reconcile_automations``), and an
    event that comes before is not matched. So a regression of a run that is no champion
    (refused, nothing changed) is posted until a run follows, and every run it made ends."""
    deadline = time.monotonic() + 180
    while not _runs_of(world, deployment):
        assert time.monotonic() < deadline, "the regression automation never ran"
        _post_regressed(world, "team-a", {"run": "no-such-run", "reason": "probe"})
        time.sleep(5)
    time.sleep(5)  # a probe still in the trigger's queue makes its run now
    for run in _runs_of(world, deployment):
        _final(world, run["id"])


@pytest.fixture
def promoted(teams: dict[str, Any]) -> dict[str, Any]:
    """Each team's run-1, run-2 and run-3 promoted in turn (run-3 the champion), afresh."""
    import shutil

    from flows.config import load_profile
    from tests.support.promoted import judge

    profiles = {}
    for team in TEAMS:
        root = teams["folder"] / team
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir()
        profiles[team] = load_profile(str(teams[f"{team}-profile"]), environ={})
        for run, mean in (("run-1", 0.3), ("run-2", 0.5), ("run-3", 0.7)):
            assert judge(profiles[team], root, run, mean)
    return profiles


def _history(profile: Any) -> list[tuple[str, str]]:
    from flows.core.promotion_store import read_history
    from flows.core.storage import LocalStorage

    return [(m.run, m.kind) for m in read_history(LocalStorage(), profile)]


UNTOUCHED = [("run-1", "promotion"), ("run-2", "promotion"), ("run-3", "promotion")]


def _legit(team: str, champion: str = "run-3") -> dict[str, Any]:
    """What the regression automation gives a run of ``team``'s rollback deployment."""
    return {"regressed_run": champion, "reason": "canary 5xx",
            "event_resource": {"prefect.resource.id": f"tpurl.model.{team}",
                               "tpurl.profile": team}}


def _post_regressed(world: dict[str, Any], team: str, payload: dict[str, Any]) -> None:
    import uuid
    from datetime import UTC, datetime

    server: PrefectServer = world["server"]
    server.api("POST", "/events", json=[{
        "id": str(uuid.uuid4()), "occurred": datetime.now(UTC).isoformat(),
        "event": "tpurl.model.regressed",
        "resource": {"prefect.resource.id": f"tpurl.model.{team}", "tpurl.profile": team},
        "payload": payload}])


def _runs_of(world: dict[str, Any], deployment: dict[str, Any]) -> list[dict[str, Any]]:
    server: PrefectServer = world["server"]
    return server.api("POST", "/flow_runs/filter", json={"flow_runs": {
        "deployment_id": {"any_": [deployment["id"]]}}, "sort": "EXPECTED_START_TIME_ASC"}).json()


def _next_run(world: dict[str, Any], deployment: dict[str, Any], before: int) -> dict[str, Any]:
    """The run the automation creates after ``before`` runs of ``deployment``, once ended."""
    run = wait_until(lambda: (runs := _runs_of(world, deployment)) and len(runs) > before
                     and runs[before], 120, "the automation's rollback run")
    return {**run, "state": _final(world, run["id"])}


def test_a_regression_naming_no_run_rolls_nothing_back(world, teams, promoted):
    """Two tpurl.model.regressed events with ``"run": ""`` (before, the two walked the
    champion back two promotions), then one with no ``run`` at all: the automation runs the
    rollback for each, and none moves the champion."""
    ended = []
    for payload in ({"run": "", "reason": "canary 5xx"}, {"run": "", "reason": "canary 5xx"},
                    {"reason": "canary 5xx"}):
        before = len(_runs_of(world, teams["team-a"]))
        _post_regressed(world, "team-a", payload)
        run = _next_run(world, teams["team-a"], before)
        ended.append((run["state"]["type"], _logs_once_they_hold(world, run["id"],
                                                                 "regressed_run")))
    assert _history(promoted["team-a"]) == UNTOUCHED
    for state, logs in ended:
        assert state == "FAILED" and "regressed_run: empty" in logs, (state, logs[-3000:])


def test_a_regression_of_another_teams_model_rolls_nothing_back(world, teams, promoted):
    """Team B's event, naming team A's champion's run, reaches team A's rollback through an
    automation that matches every model: refused, its resource not the deployment's."""
    before = len(_runs_of(world, teams["team-a"]))
    _post_regressed(world, "team-b", {"run": "run-3", "reason": "canary 5xx"})
    run = _next_run(world, teams["team-a"], before)
    logs = _logs_once_they_hold(world, run["id"], "event_resource")
    assert run["state"]["type"] == "FAILED", (run["state"], logs[-3000:])
    assert "event_resource: names model tpurl.model.team-b" in logs, logs[-3000:]
    assert _history(promoted["team-a"]) == _history(promoted["team-b"]) == UNTOUCHED


def test_a_regression_of_the_champion_rolls_back_named_by_its_automation(world, teams,
                                                                        promoted):
    """The event as the docs give it: the champion walks back one promotion, the history and
    the rolled-back event naming the automation that created the run and how that is known."""
    server: PrefectServer = world["server"]
    before = len(_runs_of(world, teams["team-a"]))
    _post_regressed(world, "team-a", {"run": "run-3", "reason": "canary 5xx"})
    run = _next_run(world, teams["team-a"], before)
    assert run["state"]["type"] == "COMPLETED", _logs(world, run["id"])[-3000:]
    assert _history(promoted["team-a"]) == [*UNTOUCHED, ("run-2", "rollback")]
    assert _history(promoted["team-b"]) == UNTOUCHED
    from flows.core.promotion_store import read_promoted
    from flows.core.storage import LocalStorage

    named = "automation 'team-a: champion regressed → rollback'"
    pointer = read_promoted(LocalStorage(), promoted["team-a"])
    assert pointer is not None and pointer.rollback is not None
    assert pointer.rollback.by == named, pointer.rollback
    assert pointer.rollback.verified.startswith("the flow run's created_by as the Prefect API "
                                                "recorded it (automation ")
    # the server stores events a moment after it accepts them
    events = wait_until(lambda: server.api("POST", "/events/filter", json={
        "limit": 50, "filter": {"event": {"name": ["tpurl.model.rolled-back"]},
                                "resource": {"id": ["tpurl.model.team-a"]}}}).json()["events"],
        60, "the rolled-back event")
    payload = events[-1]["payload"]
    assert (payload["by"], payload["verified"]) == (named, pointer.rollback.verified), payload


def test_a_run_of_the_rollback_chooses_neither_profile_nor_target(world, teams, promoted):
    """A member of team B creates a run of team A's rollback deployment (the champion's run is
    on the run page for anyone to read) choosing at once another profile (team B's, whose
    champion would walk back, with team B's event), another target (a model two promotions
    back) and its own env: refused before anything is read, each choice named, both teams'
    histories untouched. One run for the three (each a flow process on the worker): the
    refusal names every choice (a single one's: tests/test_run_choices.py)."""
    parameters = {**_legit("team-a"), "profile": str(teams["team-b-profile"]),
                  "event_resource": _legit("team-b")["event_resource"], "to_run": "run-1"}
    run = _create(world, "rollback-team-a", parameters=parameters,
                  job_variables={"env": {"TPURL_GKE__BUCKET": "theirs"}})
    assert run.status_code == 201, run.text
    final = _final(world, run.json()["id"])
    logs = _logs_once_they_hold(world, run.json()["id"], "chose what only the deployment may")
    assert final["type"] == "FAILED", (final, logs[-3000:])
    assert "chose what only the deployment may" in logs, logs[-3000:]
    for named in ("profile", "to_run", "job_variables.env.TPURL_GKE__BUCKET"):
        assert f"{named}:" in logs, (named, logs[-3000:])
    assert "theirs" not in logs
    assert _history(promoted["team-a"]) == _history(promoted["team-b"]) == UNTOUCHED


def test_a_run_cannot_name_who_rolled_back(world, teams, promoted):
    """``by`` is not the run's to say: a run that names someone else never starts the flow
    (the flow has no such parameter: Prefect's engine crashes the run on it), and no history
    names them."""
    run = _create(world, "rollback-team-a",
                  parameters={**_legit("team-a"), "by": "team-a's oncall"})
    if run.status_code == 201:
        final = _final(world, run.json()["id"])
        assert final["type"] in ("FAILED", "CRASHED"), _logs(world, run.json()["id"])[-3000:]
    else:
        assert run.status_code == 422, run.text
    from flows.core.promotion_store import read_history
    from flows.core.storage import LocalStorage

    assert all(m.rollback is None or m.rollback.by != "team-a's oncall"
               for m in read_history(LocalStorage(), promoted["team-a"]))


# The watch closing the loop on this server: team A's champion scored on the team's own set
# by a watch run here (its scores constructed as the evaluation program writes them: the
# program itself runs in the rehearsal), its regression event posted to this API, and the
# automation above running team A's rollback deployment on the worker.

def _prod_like(folder: Path) -> str:
    """Team A's own production-like set: a real parquet file (a watch reads its footer)."""
    from tests.support.parquet_rows import parquet_rows as _parquet

    return f"file://{_parquet(folder / 'sets' / 'prod-like.parquet', rows=64)}"


def _watch(profile: Any, world: dict[str, Any], score: float) -> Any:
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from flows.core.scores import ScoresFile
    from flows.core.storage import LocalStorage
    from flows.operations.watch import run_watch

    def scorer(scoring: Any, champion: Any, out: str) -> ScoresFile:
        assert scoring.eval.files == profile.watch.files
        rows = 64
        rewards = [score - 0.2, score + 0.2] * (rows // 2)
        return ScoresFile(checkpoint=champion.trained_checkpoint, total=rows,
                          correct=rows // 2, format_correct=rows, mean_reward=score,
                          rewards=rewards,
                          questions=[f"{champion.run} question {i}" for i in range(rows)],
                          responses=[{"question": f"{champion.run} question {i}",
                                      "response": f"{champion.run} says {i}",
                                      "reward": rewards[i]} for i in range(8)])

    with temporary_settings({PREFECT_API_URL: world["server"].url}):
        return run_watch(LocalStorage(), profile, scorer)


@pytest.fixture(scope="module")
def retrain_a(world: dict[str, Any], teams: dict[str, Any]) -> dict[str, Any]:
    """Team A's retrain target on a pool no worker serves (its runs wait, as a queued retrain
    waits for a slice), its dispatcher on the worker with prefect.yaml's dataset trigger
    (enabled, team A's label), one dataset announced and held by a waiting run; team A's
    profile names the target in watch.retrain."""
    import yaml

    server: PrefectServer = world["server"]
    server.create_pool("idle-process", "process", TEMPLATE)
    shipped = world[ROLLBACK]
    flows = {name: server.api("POST", "/flows/", json={"name": name}).json()["id"]
             for name in ("rl-post-training", "tpurl-announcement")}
    target = server.api("POST", "/deployments/", json={
        "name": "retrain-team-a", "flow_id": flows["rl-post-training"],
        "work_pool_name": "idle-process", "entrypoint": "flows/pipeline.py:rl_post_training",
        "pull_steps": shipped["pull_steps"], "concurrency_limit": 1,
        "concurrency_options": {"collision_strategy": "ENQUEUE"},
        "parameters": {"profile": str(teams["team-a-profile"])}}).json()
    dispatcher = server.api("POST", "/deployments/", json={
        "name": "announce-retrain-team-a", "flow_id": flows["tpurl-announcement"],
        "work_pool_name": "tpurl-process",
        "entrypoint": "flows/announcements/dispatch.py:dispatch_announcement",
        "pull_steps": shipped["pull_steps"],
        "parameters": {"deployment": "rl-post-training/retrain-team-a"}}).json()
    config = yaml.safe_load((REPO_ROOT / "prefect.yaml").read_text())
    [announce] = [d for d in config["deployments"] if d["name"] == "announce-retrain-rehearsal"]
    [trigger] = [t for t in announce["triggers"] if t["expect"] == ["tpurl.dataset.updated"]]
    server.api("POST", "/automations/", json={
        "name": "team-a: dataset announced → retrain", "enabled": True,
        "trigger": {"type": "event", "posture": "Reactive",
                    "match": {**trigger["match"], "tpurl.profile": "team-a"},
                    "expect": trigger["expect"], "threshold": 1, "within": 0},
        "actions": [{"type": "run-deployment", "source": "selected",
                     "deployment_id": dispatcher["id"],
                     "parameters": {**trigger["parameters"],
                                    "deployment": "rl-post-training/retrain-team-a"}}]})
    path = teams["team-a-profile"]
    path.write_text(path.read_text() + "watch:\n  retrain: rl-post-training/retrain-team-a\n")
    deadline = time.monotonic() + 240
    while not _runs_of(world, dispatcher):  # the triggers service loads the automation first
        assert time.monotonic() < deadline, "the dataset automation never ran the dispatcher"
        _post_dataset(world, "team-a", "v1.parquet")
        posted = time.monotonic()  # looked for every second, posted again after 15 s
        while time.monotonic() < posted + 15 and not _runs_of(world, dispatcher):
            time.sleep(1)
    time.sleep(5)  # a probe still in the trigger's queue makes its run now
    for run in _runs_of(world, dispatcher):
        _final(world, run["id"])
    assert len(_waiting(world, target)) == 1, _runs_of(world, target)
    return {"target": target, "dispatcher": dispatcher}


def _post_dataset(world: dict[str, Any], team: str, name: str) -> None:
    import uuid
    from datetime import UTC, datetime

    from tests.support.announcements import ds

    server: PrefectServer = world["server"]
    server.api("POST", "/events", json=[{
        "id": str(uuid.uuid4()), "occurred": datetime.now(UTC).isoformat(),
        "event": "tpurl.dataset.updated",
        "resource": {"prefect.resource.id": f"tpurl.dataset.{name.split('.')[0]}",
                     "tpurl.profile": team},
        "payload": {"uri": ds(name)}}])


def _waiting(world: dict[str, Any], deployment: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in _runs_of(world, deployment) if r["state"]["type"] == "SCHEDULED"]


def test_a_watched_regression_rolls_back_and_the_restored_champion_holds(world, teams, retrain_a):
    """Promote A, watch A on the team's set (its baseline), promote B (better on the
    promotion's set), watch B: worse there than A was, so regressed; the event reaches the
    automation, the rollback run on the worker restores A; a watch of A then holds and posts
    nothing. The history and the API's events show each step."""
    import shutil

    from flows.config import load_profile
    from flows.core.storage import LocalStorage
    from flows.core.watch_store import read_watches
    from tests.support.promoted import judge

    server: PrefectServer = world["server"]
    root = teams["folder"] / "team-a"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir()
    prod_like = _prod_like(teams["folder"])
    profile = load_profile(str(teams["team-a-profile"]), {"watch.files": prod_like},
                           environ={})
    assert judge(profile, root, "run-a", 0.5)
    assert _watch(profile, world, 0.6).record.verdict == "baseline"
    assert judge(profile, root, "run-b", 0.7)
    before = len(_runs_of(world, teams["team-a"]))
    regressed = _watch(profile, world, 0.3)
    assert regressed.record.verdict == "regressed" and regressed.posted, regressed.lines()
    run = _next_run(world, teams["team-a"], before)
    assert run["state"]["type"] == "COMPLETED", _logs(world, run["id"])[-3000:]
    assert _history(profile) == [("run-a", "promotion"), ("run-b", "promotion"),
                                 ("run-a", "rollback")]
    after = len(_runs_of(world, teams["team-a"]))
    holds = _watch(profile, world, 0.6)
    assert holds.record.verdict == "holds" and not holds.posted, holds.lines()
    assert [(r.champion_run, r.verdict) for r in read_watches(LocalStorage(), profile)] == [
        ("run-a", "baseline"), ("run-b", "regressed"), ("run-a", "holds")]
    def both() -> list[dict[str, Any]]:
        found = server.api("POST", "/events/filter", json={
            "limit": 50, "filter": {"event": {"name": ["tpurl.model.regressed",
                                                       "tpurl.model.rolled-back"]},
                                    "resource": {"id": ["tpurl.model.team-a"]}}}).json()
        # this module's earlier tests roll team-a back too: wait for this watch's rollback
        names = {e["event"] for e in found["events"] if e["event"] == "tpurl.model.regressed"
                 or e["payload"].get("from_run") == "run-b"}
        return found["events"] if len(names) == 2 else []

    # the server stores events a moment after it accepts them
    events = wait_until(both, 60, "the watch's and the rollback's events")
    watched = [e for e in events if e["event"] == "tpurl.model.regressed"
               and e["payload"].get("source") == "tpurl watch"]
    assert [e["payload"]["run"] for e in watched] == ["run-b"]
    evidence = watched[0]["payload"]["evidence"]
    assert evidence["set"] == f"watch.files {prod_like}"
    assert "run run-a's latest watch" in evidence["reference_source"]
    assert evidence["samples"][0] == {"prompt": "run-b question 0", "response": "run-b says 0",
                                      "reward": pytest.approx(0.1)}
    rolled = [e["payload"] for e in events if e["event"] == "tpurl.model.rolled-back"
              and e["payload"]["from_run"] == "run-b"]
    assert [(p["to_run"], p["reason"].split(":")[0]) for p in rolled] == [
        ("run-a", f"regression announced in event {watched[0]['id']}")]
    time.sleep(5)  # a second rollback, were the hold to post anything, would be created by now
    assert len(_runs_of(world, teams["team-a"])) == after
    # the retrain: the rollback announced the held dataset again, the dispatcher (a run of its
    # own on the worker) left one waiting retrain run serving that announcement
    logs = _logs_once_they_hold(world, run["id"], "retrain: dataset")
    assert "announced again to rl-post-training/retrain-team-a's dispatcher" in logs, logs[-3000:]
    event_id = logs.split("dispatcher (event ")[1].split(")")[0]
    wait_until(lambda: [r for r in _waiting(world, retrain_a["target"])
                        if r["parameters"].get("announcement", {}).get("serves", {})
                        .get("dataset", {}).get("event_id") == event_id],
               180, "the retrain run serving the rollback's announcement")
    # the dispatcher queues the new run before it cancels the one it replaces: once every
    # dispatcher run has ended, one run waits
    for dispatched in _runs_of(world, retrain_a["dispatcher"]):
        _final(world, dispatched["id"])
    waiting = _waiting(world, retrain_a["target"])
    assert len(waiting) == 1, waiting
    assert waiting[0]["parameters"]["announcement"]["serves"]["dataset"]["event_id"] == event_id
    assert waiting[0]["parameters"]["dataset_uri"].endswith("/v1.parquet")
