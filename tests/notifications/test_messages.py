"""The notify section's checks, the run-failed payload and the messages as the server renders
them (Prefect 3.9.1's own template environment, prefect/server/utilities/user_templates.py,
the one its send-notification action uses)."""

from __future__ import annotations

import pytest
from prefect.server.events.schemas.events import ReceivedEvent
from prefect.server.utilities.user_templates import render_user_template_sync

from flows.config import load_profile
from flows.config.errors import ProfileError
from flows.config.notify import NOTIFY_EVENTS
from flows.core.failures import user_error
from flows.core.redaction import Redactor
from flows.flow_runs.failure_event import failure_fields, failure_payload, profile_name
from flows.notifications.messages import KINDS, automation_spec
from tests.support.profiles import fake_hf_token


def _event(name: str, resource: dict[str, str], payload: dict) -> ReceivedEvent:
    return ReceivedEvent.model_validate({"occurred": "2026-12-01T06:00:00Z", "event": name,
                                         "resource": resource, "payload": payload,
                                         "id": "11111111-1111-4111-8111-111111111111"})


def _render(kind: str, event: ReceivedEvent) -> tuple[str, str]:
    k = KINDS[kind]  # type: ignore[index]
    return (render_user_template_sync(k.subject, {"event": event}),
            render_user_template_sync(k.body, {"event": event}))


def test_the_section_is_off_by_default_and_all_events_when_given():
    assert load_profile("rehearsal", environ={}).notify is None
    profile = load_profile("rehearsal", {"notify.block": "slack-webhook/tpurl-alerts"},
                           environ={})
    assert profile.notify is not None and profile.notify.events == list(NOTIFY_EVENTS)


@pytest.mark.parametrize("value", ["tpurl-alerts", "https://hooks.slack.com/services/T/B/C",
                                   "Slack Webhook/alerts", "slack-webhook/"])
def test_a_block_reference_of_the_wrong_shape_is_refused_without_echo(value):
    with pytest.raises(ProfileError) as caught:
        load_profile("rehearsal", {"notify.block": value}, environ={})
    text = str(caught.value)
    assert "notify.block" in text and "slack-webhook/tpurl-alerts" in text
    assert "hooks.slack.com" not in text


def test_an_unknown_event_kind_is_refused_naming_the_kinds():
    with pytest.raises(ProfileError) as caught:
        load_profile("rehearsal", {"notify.block": "slack-webhook/a",
                                   "notify.events": '["run-faild"]'}, environ={})
    assert "notify.events" in str(caught.value)


def test_a_stage_failure_becomes_the_payload_with_its_fix_and_no_secret():
    token = fake_hf_token("FailurePayload")
    failure = user_error("train", f"bad value near {token}", "detail",
                         "set train.args.x to a number", code="train/bad-arg")
    payload = failure_payload(failure, "rehearsal", "rehearsal-20261201", "http://ui/run",
                              Redactor([token]))
    assert payload["stage"] == "train" and payload["code"] == "train/bad-arg"
    assert payload["fix"] == "set train.args.x to a number"
    assert payload["support_bundle"] == "tpurl support-bundle rehearsal --run rehearsal-20261201"
    assert token not in str(payload)


def test_a_profile_refusal_and_an_undiagnosed_error_have_a_fix_too():
    try:
        load_profile("rehearsal", {"train.args.learning_rate": "fast"}, environ={})
    except ProfileError as exc:
        fields = failure_fields(exc)
    assert fields["category"] == "user-error" and fields["code"] == "profile/invalid"
    assert fields["fix"].startswith("train.args.learning_rate:")
    internal = failure_fields(RuntimeError("boom"))
    assert internal["category"] == "internal-error" and "support bundle" in internal["fix"]
    assert profile_name("deployments/profiles/rehearsal.yaml") == "rehearsal"


def test_the_run_failed_message_names_a_spend_cap_and_the_fix():
    payload = {"stage": "train", "category": "budget", "code": "gke/spend-cap",
               "summary": "the run reached gke.max_usd_per_run", "fix": "raise the cap",
               "log": "", "run": "r1", "url": "http://ui/runs/flow-run/1",
               "support_bundle": "tpurl support-bundle p --run r1"}
    subject, body = _render("run-failed", _event(
        "tpurl.run.failed", {"prefect.resource.id": "tpurl.run.p", "tpurl.profile": "p"},
        payload))
    assert subject == "tpurl p: spend cap reached [budget gke/spend-cap]"
    assert body.splitlines() == [
        "Run r1 of profile p failed in stage train.",
        "[budget gke/spend-cap] the run reached gke.max_usd_per_run",
        "Fix: raise the cap", "Support bundle: tpurl support-bundle p --run r1",
        "Run: http://ui/runs/flow-run/1"]


def test_a_rejection_against_the_base_says_there_is_no_champion():
    interval = {"value": 0.5, "low": 0.4, "high": 0.6}
    summary = {"samples": 2, "accuracy": interval, "format_accuracy": interval,
               "mean_reward": interval, "reward_samples": 2, "checkpoint": "c"}
    decision = {"promoted": False, "metric": "accuracy", "trained": 0.5, "reference": 0.5,
                "reference_kind": "base", "basis": "score", "delta": 0.0, "min_delta": 0.1,
                "reason": "not better by 0.1", "reference_run": None, "notes": ["a note"]}
    subject, body = _render("model-decided", _event(
        "tpurl.model.rejected", {"prefect.resource.id": "tpurl.model.p", "tpurl.profile": "p"},
        {"decision": decision, "scores": {"trained": summary, "base": summary}}))
    assert subject == "tpurl p: model rejected"
    assert "accuracy: trained 0.5000, base 0.5000, champion none yet" in body
    assert "Note: a note" in body


def test_every_automation_is_scoped_to_its_profile():
    for kind in NOTIFY_EVENTS:
        spec = automation_spec("p", kind, "00000000-0000-4000-8000-000000000000", "a/b")
        assert spec["trigger"]["match"]["tpurl.profile"] == "p"
        assert spec["name"] == f"tpurl-notify p: {kind}"


def test_a_watch_s_regression_says_what_was_seen_and_a_queued_retrain_what_it_serves(tmp_path):
    """The model-regressed message from the very body a watch posts (its evidence), and the
    retrain-queued one from a dispatcher's payload shape."""
    from flows.core.scores import Interval
    from flows.core.watch_record import WatchRecord, WatchSample
    from flows.operations.watch import regressed_event
    from tests.support.scores import summary

    record = WatchRecord(at="2026-12-06T02:00:00+00:00", champion_run="run-b",
                         model_uri="file:///m", set_key="k", set_name="watch.files f.parquet",
                         metric="mean_reward", scores=summary(0.3), verdict="regressed",
                         reason="mean_reward 0.3000 vs recorded 0.6000: drop +0.3000; z 4.10 > "
                                "1.88", reference=Interval(value=0.6, low=0.5, high=0.7),
                         reference_source="run run-a's latest watch on this set",
                         watch_number=1, z=4.1, threshold=1.8755, alpha_spent=0.03,
                         samples=[WatchSample(prompt="What is 2+2?", response="5", reward=0.5),
                                  "A prompt kept alone (an older record)"], flow_run="f-1")
    body = regressed_event("p", record)
    subject, text = _render("model-regressed", _event(body["event"], body["resource"],
                                                      body["payload"]))
    assert subject == "tpurl p: champion run run-b regressed"
    assert "Set: watch.files f.parquet" in text and "Watch 1: z 4.10 > threshold 1.88" in text
    assert "Sample: What is 2+2?\n  Response: 5\n  Reward: 0.5\n" in text
    assert "Sample: A prompt kept alone (an older record)\nWatch run: f-1" in text
    subject, text = _render("retrain-queued", _event(
        "tpurl.announcement.queued", {"prefect.resource.id": "tpurl.announcement.x",
                                      "tpurl.profile": "p"},
        {"kind": "dataset", "value": "file:///d.parquet", "occurred": "2026-12-06T03:00:00Z",
         "run_name": "retrain-p-d", "serves": {"dataset": "file:///d.parquet"}}))
    assert subject == "tpurl p: retrain queued (retrain-p-d)"
    assert "Dataset: file:///d.parquet" in text and "Base-model" not in text


def test_a_regressed_canary_says_what_is_served_and_that_nothing_is_rolled_back():
    """The serving-regressed message from the very body a watch posts for its canary; its
    automation matches the serving's resource, which the rollback trigger does not."""
    from flows.core.scores import Interval
    from flows.core.watch_record import WatchRecord, WatchSample
    from flows.notifications.messages import automation_spec
    from flows.operations.watch import serving_regressed_event
    from tests.support.scores import summary

    record = WatchRecord(at="2026-12-06T02:00:00+00:00", champion_run="run-b",
                         model_uri="file:///m", set_key="k", set_name="the held-out set",
                         metric="mean_reward", scores=summary(0.2), verdict="regressed",
                         reason="mean_reward 0.2000 vs recorded 0.7000: drop +0.5000",
                         reference=Interval(value=0.7, low=0.6, high=0.8),
                         reference_source="run run-b's promotion score on this set",
                         watch_number=1, z=5.2, threshold=1.8755, alpha_spent=0.03,
                         samples=[WatchSample(prompt="What is 2+2?", response="5", reward=0.0)],
                         flow_run="f-1", source="canary", served="m at http://vllm:8000")
    body = serving_regressed_event("p", record)
    subject, text = _render("serving-regressed", _event(body["event"], body["resource"],
                                                        body["payload"]))
    assert subject == "tpurl p: the served model scores below champion run run-b"
    assert "The serving canary of p (m at http://vllm:8000) scored below" in text
    assert "Canary 1: z 5.20 > threshold 1.88" in text
    assert "Sample: What is 2+2?\n  Response: 5\n  Reward: 0.0\n" in text
    assert "Nothing is rolled back" in text
    spec = automation_spec("p", "serving-regressed", "00000000-0000-4000-8000-000000000000",
                           "a/b")
    assert spec["trigger"]["match"]["prefect.resource.id"] == "tpurl.serving.p"
    assert spec["trigger"]["expect"] == ["tpurl.serving.regressed"]
