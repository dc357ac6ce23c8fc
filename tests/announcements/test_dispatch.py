"""The dispatcher against a real Prefect API (the test harness's server): runs it creates,
replaces and cancels, the announcements it records, and two dispatchers racing."""

from __future__ import annotations

import threading
import uuid
from datetime import timedelta
from typing import Any
from uuid import UUID

import httpx
import pytest
from prefect.client.orchestration import PrefectClient, get_client
from prefect.states import Cancelled, Pending, Running

from flows.announcements.dispatch import dispatch_announcement
from flows.announcements.guard import was_coalesced
from tests.support.announcements import REV, T0, announce, ds, runs_of

pytestmark = pytest.mark.usefixtures("prefect_api")


def test_announcements_during_a_run_leave_one_waiting_run_with_the_newest(target):
    deployment, deployment_id = target
    first, result = announce(deployment, "dataset", ds("v2.parquet"), 1)
    assert result["decision"] == "queued"
    running_id = UUID(result["run"])
    with get_client(sync_client=True) as client:  # what the worker does with it
        client.set_flow_run_state(running_id, Pending(), force=True)
        client.set_flow_run_state(running_id, Running(), force=True)

    v3, queued = announce(deployment, "dataset", ds("v3.parquet"), 3)
    assert queued["decision"] == "queued" and queued["replaced"] == []
    rev, merged = announce(deployment, "base-model", REV, 4)
    assert merged["replaced"] == [queued["run"]]
    _, older = announce(deployment, "dataset", ds("v2b.parquet"), 2)
    assert older["decision"] == "superseded" and older["by"] == v3
    _, again = announce(deployment, "dataset", ds("v3.parquet"), 3, event_id=v3)
    assert again["decision"] == "duplicate"
    v4, newest = announce(deployment, "dataset", ds("v4.parquet"), 5)
    assert newest["coalesced"] == [v3]

    runs = {str(r.id): r for r in runs_of(deployment_id)}
    assert runs[str(running_id)].state.is_running()
    waiting = [r for r in runs.values() if r.state.is_scheduled()]
    assert [str(r.id) for r in waiting] == [newest["run"]]
    (follow,) = waiting
    assert follow.parameters["dataset_uri"] == ds("v4.parquet")
    assert follow.parameters["model_revision"] == REV
    assert follow.parameters["profile"] == "rehearsal"  # the deployment's own parameters kept
    assert follow.parameters["announcement"]["serves"]["base-model"]["event_id"] == rev
    assert follow.name.startswith(f"rehearsal-v4.parquet+rev-{REV[:12]}")
    for replaced in (queued["run"], merged["run"]):
        state = runs[replaced].state
        assert state.is_cancelled() and state.message.startswith("Coalesced into ")
        assert was_coalesced(replaced) == state.message
    assert was_coalesced(newest["run"]) is None
    assert first and v4


class _Window:
    """The race window of a dispatcher (it has read the target's runs and decides), held
    open for the first dispatcher to enter it until every other dispatcher is inside it
    too (nothing kept them out: the race is certain) or the lock turned one away while the
    first was inside, after all of them had reached the lock. Either way the others tried
    to enter while it was open, so a missing lock fails the test on every run."""

    def __init__(self, dispatchers: int, lock: str) -> None:
        self.dispatchers, self.lock = dispatchers, lock
        self.changed = threading.Condition()
        self.arrived = self.inside = self.turned_away = 0
        self.held_open: str | None = None  # why the first one was let go

    def arrive(self) -> None:  # at the lock's door (the dispatcher makes sure it exists)
        with self.changed:
            self.arrived += 1
            self.changed.notify_all()

    def refused(self, names: list[str]) -> None:
        with self.changed:
            if self.lock in names and self.inside and self.arrived == self.dispatchers:
                self.turned_away += 1
                self.changed.notify_all()

    def enter(self) -> None:
        with self.changed:
            self.inside += 1
            self.changed.notify_all()
            if self.inside > 1:
                return
            if self.changed.wait_for(lambda: self.inside == self.dispatchers or
                                     self.turned_away > 0, 120):
                self.held_open = "all inside" if self.inside == self.dispatchers else \
                    "turned away"


@pytest.fixture
def race_window(target, monkeypatch: pytest.MonkeyPatch) -> _Window:
    """Three dispatchers' window, through the module's own calls: ``ensure_lock`` (just
    before the lock) and ``decide_batch`` (inside it, after the runs were read), and the lock's
    requests to the server."""
    from flows.announcements import dispatch

    window = _Window(3, dispatch.dispatch_lock_name(str(target[1])))
    real_ensure, real_decide = dispatch.ensure_lock, dispatch.decide_batch

    def ensure_lock(client: Any, name: str) -> None:
        real_ensure(client, name)
        window.arrive()

    def decide_batch(items: Any, runs: Any) -> Any:
        window.enter()
        return real_decide(items, runs)

    async def increment(client: Any, names: list[str], *args: Any, **kwargs: Any) -> Any:
        """What Prefect's lock asks the server; a 423 is the lock turning one away (prefect
        3.9.1: the call, prefect/client/orchestration/_concurrency_limits/client.py line
        727; its retry on 423 after Retry-After, prefect/concurrency/services.py lines
        172-198)."""
        try:
            return await real_increment(client, names, *args, **kwargs)
        except httpx.HTTPStatusError as exc:
            if exc.response.status_code == 423:
                window.refused(names)
            raise

    real_increment = PrefectClient.increment_concurrency_slots_with_lease
    monkeypatch.setattr(dispatch, "ensure_lock", ensure_lock)
    monkeypatch.setattr(dispatch, "decide_batch", decide_batch)
    monkeypatch.setattr(PrefectClient, "increment_concurrency_slots_with_lease", increment)
    return window


def test_two_dispatchers_racing_leave_exactly_one_waiting_run(target, race_window):
    deployment, deployment_id = target
    results: list[dict] = []
    errors: list[BaseException] = []

    def dispatch(value: str, minute: int) -> None:
        try:
            results.append(announce(deployment, "dataset", value, minute)[1])
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=dispatch, args=(ds(f"v{i}.parquet"), i))
               for i in range(1, 4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    assert race_window.held_open is not None, "the window closed on its 120 s bound"
    waiting = [r for r in runs_of(deployment_id) if r.state.is_scheduled()]
    assert len(waiting) == 1, ([(r.name, r.state.name) for r in waiting],
                               race_window.held_open)
    assert waiting[0].parameters["dataset_uri"] == ds("v3.parquet")
    assert race_window.held_open == "turned away"  # the lock kept the others out


def test_a_run_the_worker_took_just_before_its_cancel_knows_it_was_coalesced(target):
    """Prefect accepts Cancelled on a Pending run and then Running from Cancelled (checked
    here), so the run itself must notice; flows/announcements/guard.py."""
    deployment, _ = target
    _, old = announce(deployment, "dataset", ds("v2.parquet"), 1)
    with get_client(sync_client=True) as client:
        client.set_flow_run_state(UUID(old["run"]), Pending(), force=True)
        cancel = client.set_flow_run_state(UUID(old["run"]), Cancelled(
            message="Coalesced into rehearsal-x (id), queued for …"))
        assert cancel.state is not None and cancel.state.is_cancelled()
        rerun = client.set_flow_run_state(UUID(old["run"]), Running())
        assert rerun.state is not None and rerun.state.is_running()
    assert was_coalesced(old["run"]).startswith("Coalesced into rehearsal-x")



def test_a_replaced_run_and_the_dispatcher_say_which_run_replaced_which(target):
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.logging.handlers import APILogWorker

    deployment, _ = target
    _, first = announce(deployment, "dataset", ds("a.parquet"), 1)
    dispatcher = dispatch_announcement(deployment=deployment, kind="dataset",
                                       value=ds("b.parquet"), event_id=str(uuid.uuid4()),
                                       occurred=str(T0 + timedelta(minutes=2)), return_state=True)
    second = dispatcher.result()
    assert second["replaced"] == [first["run"]]
    APILogWorker.drain_all(timeout=10)

    def logs(run_id) -> list[str]:
        with get_client(sync_client=True) as client:
            return [entry.message for entry in client.read_logs(log_filter=LogFilter(
                flow_run_id=LogFilterFlowRunId(any_=[UUID(str(run_id))])))]

    with get_client(sync_client=True) as client:
        new_name = client.read_flow_run(UUID(second["run"])).name
    [line] = logs(first["run"])  # it never started: this is the whole of its log
    assert line.startswith(f"Not run: Coalesced into {new_name} ({second['run']})"), line
    said = logs(dispatcher.state_details.flow_run_id)
    assert f"cancelled waiting run {first['run']}: replaced by {new_name}" in said, said


def test_kind_is_a_choice_prefect_offers_and_enforces(target):
    """The run form shows `kind` as a dropdown (an enum in the parameter schema, which
    `prefect deploy` computes with parameter_schema, prefect/cli/deploy/_core.py); a run of
    the deployment with another kind is refused by the server's schema check
    (prefect/server/api/deployments.py, enforce_parameter_schema), and a direct call by the
    flow's own parameter validation, before the dispatcher does anything."""
    from prefect.exceptions import PrefectHTTPStatusError
    from prefect.utilities.callables import parameter_schema

    schema = parameter_schema(dispatch_announcement).model_dump_for_openapi()
    assert schema["properties"]["kind"]["enum"] == ["dataset", "base-model"]
    deployment, target_id = target
    good = {"deployment": deployment, "kind": "dataset", "value": ds("x.parquet"),
            "event_id": str(uuid.uuid4()), "occurred": str(T0)}
    with get_client(sync_client=True) as client:
        flow_id = client.create_flow_from_name("tpurl-announcement")
        dispatcher = client.create_deployment(
            flow_id=flow_id, name=f"announce-{uuid.uuid4().hex[:8]}",
            parameter_openapi_schema=schema, enforce_parameter_schema=True)
        assert client.create_flow_run_from_deployment(dispatcher, parameters=good).id
        with pytest.raises(PrefectHTTPStatusError, match="409") as refused:
            client.create_flow_run_from_deployment(dispatcher, parameters={
                **good, "kind": "dataset-updated"})
    assert "kind" in refused.value.response.text and "dataset" in refused.value.response.text

    state = dispatch_announcement(**{**good, "kind": "model"}, return_state=True)
    assert state.is_failed() and state.message.startswith("Validation of flow parameters"), \
        state.message
    assert runs_of(target_id) == []  # no retrain run was made
