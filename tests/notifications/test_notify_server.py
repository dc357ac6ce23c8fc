"""Notifications against a real `prefect server start` (its triggers and actions services
deliver them), with a local HTTP receiver as the webhook: the deploy step's checks and its
in-place updates, and one message per event for each kind, none carrying the block's secret.

The block is Prefect 3.9.1's own CustomWebhookNotificationBlock with a secret header value
(prefect/blocks/notifications.py: ``secrets`` are substituted into the request at send time,
on the server), so the receiver sees the secret only where the block puts it.
The run-failed message comes from a real flow run of the rehearsal refused at validation (a
profile error: seconds, no stage); the others from the very functions the flow and the
dispatcher emit them with, called in this process on this module's server (its settings,
its own events worker: a fresh interpreter for each cost a second of CPU apiece and proved
nothing more); the rollback's and the clearance's from `tpurl rollback` and `tpurl
promote` themselves. The deploy step's refusals run in a fresh interpreter, as `prefect
deploy` runs the step: all it prints, and its exit code, are what is read there.
tests/e2e/test_prefect_deploy.py does the same with a failed stage and a promotion decision
of real rehearsal runs.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import pwd
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from flows.common.paths import REPO_ROOT
from flows.config.notify import NOTIFY_EVENTS
from tests.fakes.smtp_server import smtp_server
from tests.support.prefect_server import PrefectServer, prefect_server_in, wait_until
from tests.support.profiles import fake_hf_token
from tests.support.webhook_receiver import Receiver, webhook_receiver

pytestmark = [pytest.mark.services, pytest.mark.realtime]

CANARY = fake_hf_token("Nb6Yc1Vz8Lu")
BLOCK = "custom-webhook/tpurl-test-alerts"
SETTLE_S = 8  # after the first message: time for a duplicate to arrive, if there were one


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrefectServer]:
    with prefect_server_in(tmp_path_factory.mktemp("notify-home")) as found:
        yield found


@pytest.fixture(scope="module")
def receiver(server: PrefectServer) -> Iterator[Receiver]:
    from prefect.blocks.notifications import CustomWebhookNotificationBlock

    with webhook_receiver() as found:
        with _on(server):
            CustomWebhookNotificationBlock(
                name="tpurl-test", url=found.url,
                json_data={"subject": "{{subject}}", "text": "{{body}}"},
                headers={"Authorization": "Bearer {{token}}"},
                secrets={"token": CANARY}).save("tpurl-test-alerts")
        yield found


@contextlib.contextmanager
def _on(server: PrefectServer, emits: bool = False) -> Iterator[None]:
    """This process's Prefect client on the module's server. With ``emits``, every event
    emitted inside has been sent when it returns (the events worker of that server's URL,
    drained as a process's is at exit), so the message a test then waits for is on its way."""
    from prefect.events.worker import EventsWorker
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: server.url}):
        yield
        if emits:
            EventsWorker.instance().drain()


def _python(server: PrefectServer, code: str, check: bool = True) -> subprocess.CompletedProcess:
    """Code in a fresh interpreter against the server (its own events client and settings)."""
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, env=server.env,
                          text=True, capture_output=True, timeout=300, check=False)
    if check:
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


# The notify setting the server's automations were last made from: only _step changes them.
APPLIED: dict[str, dict | None] = {}


def _step(server: PrefectServer, notify: dict | None) -> subprocess.CompletedProcess:
    """The deploy step (flows/notifications/apply.py) in this process: what it prints and
    its exit code (a refusal is its SystemExit)."""
    from flows.notifications.apply import notification_automations

    out, err, code = io.StringIO(), io.StringIO(), 0
    APPLIED.pop("notify", None)  # a refusal may have changed nothing or something
    with _on(server), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            print(notification_automations("rehearsal", notify))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    if code == 0:
        APPLIED["notify"] = notify
    return subprocess.CompletedProcess("notification_automations", code, out.getvalue(),
                                       err.getvalue())


def _refused_step(server: PrefectServer, notify: dict) -> subprocess.CompletedProcess:
    """The deploy step in a fresh interpreter, as `prefect deploy` runs it: everything the
    process prints (a log line, a traceback) is in what the refusal tests read."""
    done = _python(server, "from flows.notifications.apply import notification_automations as n;"
                   f"print(n('rehearsal', {notify!r}))", check=False)
    APPLIED.pop("notify", None)  # a refusal may have changed nothing or something
    return done


def _webhook_automations(server: PrefectServer) -> None:
    """Every event kind's automation on the webhook block, as the message tests need them:
    the step runs only when the last one applied something else (a test of its own, or
    none yet), so each test holds alone and the module pays the step's process once."""
    if APPLIED.get("notify") != {"block": BLOCK}:
        assert _step(server, {"block": BLOCK}).returncode == 0


def _automations(server: PrefectServer) -> list[dict]:
    return server.api("POST", "/automations/filter", json={}).json()


def _one_message(receiver: Receiver, before: int, what: str) -> dict:
    """Exactly one new POST: the first within 90 s, then none more within SETTLE_S."""
    wait_until(lambda: len(receiver.snapshot()) > before, 90, what)
    time.sleep(SETTLE_S)
    new = receiver.snapshot()[before:]
    assert len(new) == 1, [r.body for r in new]
    assert new[0].headers.get("Authorization") == f"Bearer {CANARY}"  # the block's secret, sent
    assert CANARY not in new[0].body
    return new[0].json()


def test_a_misnamed_block_is_refused_before_any_automation(server, receiver):
    done = _refused_step(server, {"block": "custom-webhook/tpurl-test-alertz"})
    assert done.returncode == 1
    assert "notify.block: no block custom-webhook/tpurl-test-alertz" in done.stderr
    assert "prefect block create custom-webhook" in done.stderr
    assert "Traceback" not in done.stderr
    assert _automations(server) == []


def test_a_url_in_place_of_a_block_is_refused_without_echoing_it(server, receiver):
    url = f"https://hooks.slack.com/services/T0/B0/{CANARY}"
    done = _refused_step(server, {"block": url})
    assert done.returncode == 1 and "notify.block" in done.stderr
    assert CANARY not in done.stdout + done.stderr and "hooks.slack" not in done.stderr
    assert _automations(server) == []


def test_redeploy_updates_the_automations_in_place(server, receiver):
    first = _step(server, {"block": BLOCK})
    assert first.returncode == 0, first.stderr
    ids = {a["name"]: a["id"] for a in _automations(server)}
    assert set(ids) == {f"tpurl-notify rehearsal: {kind}" for kind in NOTIFY_EVENTS}
    again = _step(server, {"block": BLOCK})
    assert "updated automation" in again.stdout and "created" not in again.stdout
    assert {a["name"]: a["id"] for a in _automations(server)} == ids  # none duplicated
    fewer = _step(server, {"block": BLOCK, "events": ["run-failed", "model-decided"]})
    assert fewer.returncode == 0, fewer.stderr
    assert {a["name"] for a in _automations(server)} == {
        "tpurl-notify rehearsal: run-failed", "tpurl-notify rehearsal: model-decided"}
    _webhook_automations(server)
    text = json.dumps(_automations(server)) + first.stdout + again.stdout
    assert CANARY not in text and "127.0.0.1" not in text  # the block's URL stays in it
    for automation in _automations(server):
        match = automation["trigger"]["match"]
        assert match["tpurl.profile"] == "rehearsal"


def test_a_failed_run_sends_one_message_with_the_fix(server, receiver):
    _webhook_automations(server)
    before = len(receiver.snapshot())
    done = _python(server, "from flows.pipeline import rl_post_training;"
                   "rl_post_training(profile='rehearsal', overrides="
                   "{'train.args.learning_rate': 'fast'})", check=False)
    assert done.returncode != 0
    message = _one_message(receiver, before, "the run-failed message")
    assert message["subject"].startswith("tpurl rehearsal: run failed [user-error profile/invalid]")
    text = message["text"]
    assert "Fix: train.args.learning_rate:" in text
    assert "Support bundle: tpurl support-bundle rehearsal --run " in text
    assert "Run: http" in text and "/runs/flow-run/" in text


def test_a_promotion_sends_one_message_with_the_scores(server, receiver):
    from flows.core.promotion import Decision
    from flows.runpage.promotion import emit_decision

    _webhook_automations(server)
    before = len(receiver.snapshot())

    def summary(v: float) -> dict:
        i = {"value": v, "low": v - 0.1, "high": v + 0.1}
        return {"samples": 2, "accuracy": i, "format_accuracy": i, "mean_reward": i,
                "reward_samples": 2, "checkpoint": "file:///x"}

    d = Decision(promoted=True, metric="mean_reward", trained=0.75, reference=0.5,
                 reference_kind="promoted", delta=0.25, min_delta=0.0,
                 reason="0.75 >= 0.5 + 0.0", reference_run="rehearsal-older")

    class Model:
        model_uri, run, dataset, revision = "file:///export", "rehearsal-new", "data", "main"

    with _on(server, emits=True):
        emit_decision("rehearsal", d, {"trained": summary(0.75), "base": summary(0.25)},
                      Model(), None)
    message = _one_message(receiver, before, "the promotion message")
    assert message["subject"] == "tpurl rehearsal: model promoted"
    text = message["text"]
    assert "Model of run rehearsal-new promoted: 0.75 >= 0.5 + 0.0" in text
    assert "mean_reward: trained 0.7500, base 0.2500, champion 0.5000 (run rehearsal-older)" \
        in text
    assert "Model: file:///export" in text


def test_a_coalesced_retrain_and_a_capacity_fallback_send_one_message_each(server, receiver):
    from prefect.events import emit_event

    from flows.announcements.events import announcement_event
    from flows.announcements.model import Announcement

    _webhook_automations(server)
    before = len(receiver.snapshot())
    old = Announcement.of("dataset", "file:///data/v8.parquet",
                          "11111111-1111-4111-8111-111111111111", "2026-12-01T06:00:00Z")
    new = Announcement.of("dataset", "file:///data/v9.parquet",
                          "22222222-2222-4222-8222-222222222222", "2026-12-01T06:05:00Z")
    with _on(server, emits=True):
        announcement_event("coalesced", old, ("3f0c0d7e-0000-4000-8000-000000000000",
                           "rl-post-training/retrain-rehearsal"),
                           {"rule": "coalesced", "into_run": "run-9", "into": new.to_dict(),
                            "replaced_runs": ["run-8"]},
                           profile="rehearsal")
        # another profile's coalesced announcement: not this profile's message
        announcement_event("coalesced", old, ("3f0c0d7e-0000-4000-8000-000000000001", "x/y"),
                           {"rule": "coalesced", "into_run": "run-9", "into": new.to_dict(),
                            "replaced_runs": []},
                           profile="qwen3-30b-a3b-v6e-32")
    message = _one_message(receiver, before, "the coalesced message")
    assert message["subject"] == "tpurl rehearsal: retrain coalesced"
    assert "dataset file:///data/v8.parquet" in message["text"]
    assert "serves dataset file:///data/v9.parquet" in message["text"]
    before = len(receiver.snapshot())
    with _on(server, emits=True):
        emit_event(event="tpurl.capacity.fallback",
                   resource={"prefect.resource.id": "tpurl.capacity.rehearsal",
                             "tpurl.profile": "rehearsal"},
                   payload={"from": "reservation", "to": "flex-start", "reason": "stockout"})
    message = _one_message(receiver, before, "the fallback message")
    assert message["subject"] == "tpurl rehearsal: capacity fallback"
    assert "from: reservation" in message["text"] and "to: flex-start" in message["text"]


def test_a_rollback_sends_one_message_and_its_event_is_on_the_api(server, receiver, tmp_path):
    """`tpurl rollback` run as an operator runs it (PREFECT_API_URL set): the event is on
    the API with its catalogued payload, and the notify automation sends one message."""
    from flows.config import load_profile
    from tests.support.promoted import judge

    profile = load_profile("rehearsal", {"local.root": str(tmp_path)}, environ={})
    assert judge(profile, tmp_path, "run-1", 0.5) and judge(profile, tmp_path, "run-2", 0.7)
    _webhook_automations(server)
    before = len(receiver.snapshot())
    done = subprocess.run([sys.executable, "-m", "flows.cli", "rollback", "rehearsal", "--set",
                           f"local.root={tmp_path}", "--reason", "canary 5xx", "--by",
                           "oncall"], cwd=REPO_ROOT, env=server.env, text=True,
                          capture_output=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no tpurl.model.rolled-back event" not in done.stderr
    message = _one_message(receiver, before, "the rollback message")
    assert message["subject"] == "tpurl rehearsal: model rolled back to run run-1"
    text = message["text"]
    assert "oncall rolled the champion of rehearsal back from run run-2 to run run-1" in text
    # --by is a claim: the message says so, and names the account that ran the command
    account = pwd.getpwuid(os.getuid()).pw_name
    assert ("Who: oncall, known from given with --by, not verified (`tpurl rollback` ran as "
            f"OS account {account})") in text
    assert "Reason: canary 5xx" in text and "Model: file://" in text
    found = server.api("POST", "/events/filter", json={"limit": 50, "filter": {
        "event": {"name": ["tpurl.model.rolled-back"]}}}).json()["events"]
    assert len(found) == 1
    assert found[0]["resource"]["prefect.resource.id"] == "tpurl.model.rehearsal"
    assert {k: found[0]["payload"][k] for k in ("from_run", "to_run", "by", "reason")} == {
        "from_run": "run-2", "to_run": "run-1", "by": "oncall", "reason": "canary 5xx"}
    assert found[0]["payload"]["verified"].startswith("given with --by, not verified")


def test_a_suspect_training_and_its_clear_each_send_one_message(server, receiver, tmp_path):
    """The sentinel's finding (flows/health/sentinel.py announce, as the flow calls it) and
    `tpurl promote --clear` run as an operator runs it: each event on the API, each message
    saying what a person needs (the detector, its policy, the command; who cleared and why)."""
    from flows.config import load_profile
    from flows.health import sentinel
    from tests.support.promoted import export
    from tests.support.scores import summary

    _webhook_automations(server)
    before = len(receiver.snapshot())
    steps = [{"step": s, "rewards/train/mean": 1.0, "rewards/train/min": 1.0,
              "rewards/train/max": 1.0} for s in range(2)]
    with _on(server, emits=True):
        judged = sentinel.after_training(steps, load_profile("rehearsal", environ={}).health)
        sentinel.announce("rehearsal", "run-h", judged, print)
    message = _one_message(receiver, before, "the suspect message")
    assert message["subject"] == "tpurl rehearsal: training suspect (group_collapse, hold)"
    assert "detector group_collapse fired at step 1" in message["text"]
    assert "tpurl promote rehearsal --clear run-h --reason" in message["text"]

    profile = load_profile("rehearsal", {"local.root": str(tmp_path)}, environ={})
    from flows.core.storage import LocalStorage
    from flows.runpage.promotion import promote_or_reject

    evaluation = {"trained": summary(0.5).model_dump(), "base": summary(0.1).model_dump()}
    decision, _ = promote_or_reject(
        LocalStorage(), profile, "run-h", evaluation,
        {"hf_export": export(tmp_path, "run-h"), "trained_checkpoint": "file:///c/run-h"},
        None, "eval-key", "score-key",
        sentinel.holding(sentinel.after_training(steps, profile.health)))
    assert decision.held
    before = len(receiver.snapshot())
    done = subprocess.run([sys.executable, "-m", "flows.cli", "promote", "rehearsal", "--set",
                           f"local.root={tmp_path}", "--clear", "run-h", "--reason",
                           "constant on purpose"], cwd=REPO_ROOT, env=server.env, text=True,
                          capture_output=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    message = _one_message(receiver, before, "the promoted message")
    assert message["subject"] == "tpurl rehearsal: model promoted"
    found = server.api("POST", "/events/filter", json={"limit": 50, "filter": {
        "event": {"name": ["tpurl.model.promoted"]}}}).json()["events"]
    cleared = [e for e in found if e["payload"].get("run") == "run-h"]
    assert len(cleared) == 1
    assert cleared[0]["payload"]["clearance"]["reason"] == "constant on purpose"
    assert cleared[0]["payload"]["clearance"]["detectors"] == ["group_collapse"]


def test_a_watch_s_regression_sends_one_message_with_its_evidence(server, receiver, tmp_path):
    """A watch (flows/operations/watch.py, its scores constructed as the evaluation program
    writes them) of a champion that dropped: its event reaches the API and the notify
    automation sends one message naming the run, the set and the watch's numbers."""
    from flows.config import load_profile
    from flows.core.eval_programs import score_key
    from flows.core.scores import ScoresFile
    from flows.core.storage import LocalStorage
    from flows.operations.watch import run_watch
    from tests.support.promoted import judge

    _webhook_automations(server)
    before = len(receiver.snapshot())
    profile = load_profile("rehearsal", {"local.root": str(tmp_path)}, environ={})
    key = score_key(profile)
    assert judge(profile, tmp_path, "run-1", 0.5, key) and \
        judge(profile, tmp_path, "run-2", 0.7, key)
    rows = 64

    def scorer(scoring, champion, out) -> ScoresFile:
        return ScoresFile(checkpoint="c", total=rows, correct=0, format_correct=rows,
                          mean_reward=0.2, rewards=[0.1, 0.3] * (rows // 2),
                          questions=["What is 2+2?"] * rows,
                          responses=[{"question": "What is 2+2?", "response": "5",
                                      "reward": 0.1}])

    with _on(server):
        outcome = run_watch(LocalStorage(), profile, scorer)
    assert outcome.record.verdict == "regressed" and outcome.posted, outcome.lines()
    message = _one_message(receiver, before, "the regression message")
    assert message["subject"] == "tpurl rehearsal: champion run run-2 regressed"
    text = message["text"]
    assert "Set: the promotion's held-out set" in text and "Watch 1: z " in text
    assert "Sample: What is 2+2?\n  Response: 5\n  Reward: 0.1" in text


# the block's Apprise, imported in this process, imports imghdr (deprecated in Python 3.12)
@pytest.mark.filterwarnings("ignore:'imghdr' is deprecated:DeprecationWarning")
def test_an_email_goes_out_through_smtp_with_the_password_only_in_the_login(server, receiver):
    """Email over SMTP: Prefect 3.9.1 ships no SMTP notification block, but its Slack
    Webhook block hands a URL that is not a Slack webhook to Apprise as is
    (prefect/blocks/notifications.py ``SlackWebhook.block_initialization``), and Apprise
    sends a ``mailto://`` URL by SMTP (apprise/plugins/email/base.py)."""
    from prefect.blocks.notifications import SlackWebhook
    from prefect.events import emit_event

    password = fake_hf_token("Sm4Tk9Xq2Ro")
    with smtp_server() as mailbox:
        with _on(server):
            SlackWebhook(url=f"mailto://alerts:{password}@{mailbox.host}:{mailbox.port}"
                             "?to=oncall@example.com&from=tpurl@example.com"
                         ).save("tpurl-test-email")
        done = _step(server, {"block": "slack-webhook/tpurl-test-email",
                              "events": ["capacity-fallback"]})
        assert done.returncode == 0, done.stderr
        with _on(server, emits=True):
            emit_event(event="tpurl.capacity.fallback",
                       resource={"prefect.resource.id": "tpurl.capacity.rehearsal",
                                 "tpurl.profile": "rehearsal"},
                       payload={"from": "spot", "to": "on-demand", "reason": "preempted twice"})
        wait_until(lambda: mailbox.messages, 90, "the email")
        time.sleep(SETTLE_S)
        assert len(mailbox.messages) == 1
        mail = mailbox.messages[0]
        assert "Subject: tpurl rehearsal: capacity fallback" in mail
        assert "To: oncall@example.com" in mail and "from: spot" in mail
        assert password not in mail and len(mailbox.auth) == 1
        assert password not in json.dumps(_automations(server)) + done.stdout
    assert _step(server, {"block": BLOCK}).returncode == 0  # back to the webhook


def test_no_event_or_automation_carries_the_secret(server, receiver):
    found = server.api("POST", "/events/filter", json={"limit": 50}).json()
    texts = [json.dumps(found)]
    while found.get("next_page"):
        found = server.api("GET", found["next_page"].split("/api", 1)[1]).json()
        texts.append(json.dumps(found))
    texts.append(json.dumps(_automations(server)))
    assert not [t for t in texts if CANARY in t]
