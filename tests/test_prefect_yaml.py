"""prefect.yaml read as `prefect deploy` reads it, without a server: the announcement examples
(docs/how-to/announce.md and the file's own comment) are events Prefect's API accepts and
each matches exactly the trigger meant for it; the Docker-free deployments come first; every
trigger's automation carries its description.

The checks use Prefect's own models at the pinned version: the API's event schema
(prefect/server/events/schemas/events.py, the body of POST /api/events: `id` and `occurred`
required), the server's trigger matching (prefect/server/events/schemas/automations.py,
EventTrigger.covers) and the deployment trigger schema `prefect deploy` validates triggers
with (prefect/events/schemas/deployment_triggers.py, via prefect/cli/deploy/_triggers.py).
tests/test_deploy_server.py posts the docs' example to a real server.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

import pytest
import yaml
from prefect.cli.deploy._triggers import DeploymentTriggerAdapter
from prefect.server.events.schemas.automations import EventTrigger
from prefect.server.events.schemas.events import Event
from pydantic import ValidationError

from flows.common.paths import REPO_ROOT
from flows.config import profile_names
from tests.support.readme import heredoc, json_block, yaml_block

PREFECT_YAML = REPO_ROOT / "prefect.yaml"
DISPATCHERS = {"rehearsal": "announce-retrain-rehearsal",
               "qwen3-30b-a3b-v6e-32": "announce-qwen3-30b-a3b-v6e-32-retrain"}
_COMMENT_EXAMPLE = re.compile(r"POST /api/events(?:.*\n)*?((?:  #   .*\n)+)")


def _config() -> dict[str, Any]:
    return yaml.safe_load(PREFECT_YAML.read_text())


def _triggers() -> list[tuple[str, dict[str, Any]]]:
    return [(d["name"], t) for d in _config()["deployments"] for t in d.get("triggers", [])]


def _examples() -> dict[str, list[dict[str, Any]]]:
    comment = _COMMENT_EXAMPLE.search(PREFECT_YAML.read_text())
    assert comment, "prefect.yaml's announcement example comment is gone"
    body = "".join(line.removeprefix("  #   ") + "\n" for line in comment[1].splitlines())
    return {"docs": json.loads(json_block("announce-dataset", "how-to/announce.md")),
            "prefect.yaml": json.loads(body)}


@pytest.mark.parametrize("where", ["docs", "prefect.yaml"])
def test_the_announcement_examples_are_events_the_api_accepts(where):
    for body in _examples()[where]:
        Event.model_validate(body)
        for field in ("id", "occurred"):  # what made the first example a 422
            with pytest.raises(ValidationError, match=field):
                Event.model_validate({k: v for k, v in body.items() if k != field})


@pytest.mark.parametrize("where", ["docs", "prefect.yaml"])
def test_each_example_matches_only_the_trigger_of_its_profile_and_kind(where):
    triggers = _triggers()
    for body in _examples()[where]:
        received = Event.model_validate(body).receive()
        covering = [(name, t["parameters"]["kind"]) for name, t in triggers
                    if EventTrigger(posture="Reactive", match=t["match"],
                                    expect=set(t["expect"])).covers(received)]
        kind = body["event"].removeprefix("tpurl.").removesuffix(".updated")
        target = DISPATCHERS[body["resource"]["tpurl.profile"]]
        assert covering == [(target, kind)], (body, covering)


def test_an_example_without_the_profile_label_matches_no_trigger():
    [body, *_] = _examples()["docs"]
    body = {**body, "resource": {"prefect.resource.id": body["resource"]["prefect.resource.id"]}}
    received = Event.model_validate(body).receive()
    assert not [t for _, t in _triggers() if EventTrigger(
        posture="Reactive", match=t["match"], expect=set(t["expect"])).covers(received)]


def test_each_dispatcher_declares_the_target_its_triggers_name():
    """A dispatcher's run may announce only to the deployment its deployment declares
    (flows/deployed/run_choices.py ``fixed``), so each declares the one its triggers pass."""
    config = yaml.safe_load(PREFECT_YAML.read_text())
    dispatchers = [d for d in config["deployments"]
                   if d["entrypoint"].startswith("flows/announcements/dispatch.py")]
    assert {d["name"] for d in dispatchers} == set(DISPATCHERS.values())
    for dispatcher in dispatchers:
        declared = dispatcher["parameters"]["deployment"]
        assert declared == "rl-post-training/" + dispatcher["name"].removeprefix("announce-")
        assert {t["parameters"]["deployment"] for t in dispatcher["triggers"]} == {declared}


def test_the_docs_own_dispatcher_binds_its_runs_to_its_target():
    """how-to/announce.md's dispatcher of your own, as written: its runs may announce to the
    deployment it declares and to no other."""
    from flows.deployed.declared import Declared
    from flows.deployed.run_choices import MUST_DECLARE, refused_choices

    [own] = yaml.safe_load(yaml_block("own-dispatcher", "how-to/announce.md"))
    assert own["entrypoint"] == "flows/announcements/dispatch.py:dispatch_announcement"
    declared = Declared(own["parameters"])
    target = own["parameters"]["deployment"]
    for run, refused in (({"deployment": target}, False),
                         ({"deployment": "rl-post-training/retrain-rehearsal"}, True)):
        issues = refused_choices({}, declared, run, profile_fixed=False, fixed={"deployment": MUST_DECLARE})
        assert bool(issues) == refused, (run, issues)


def test_docker_free_deployments_come_before_any_that_builds_the_image():
    """`prefect deploy --all` stops at its first failure (prefect/cli/deploy/_core.py,
    _run_multi_deploy): without Docker that is the first image build, so every deployment
    that needs none must already be behind it."""
    deployments = _config()["deployments"]
    # the notify step (flows/notifications/apply.py) needs no Docker: only the image's do
    builds = ["prefect_docker" in str([*d.get("build", []), *d.get("push", [])])
              for d in deployments]
    assert True in builds and False in builds
    first_build = builds.index(True)
    assert not any(builds[:first_build]) and all(builds[first_build:]), [
        (d["name"], b) for d, b in zip(deployments, builds, strict=True)]
    assert "teardown-qwen3-30b-a3b-v6e-32" in [d["name"] for d in deployments[:first_build]]


def test_every_trigger_has_a_description_its_automation_carries():
    triggers = _triggers()
    assert len(triggers) == 6
    for deployment, raw in triggers:
        assert len(raw.get("description", "")) > 80, (deployment, raw["name"])
        trigger = DeploymentTriggerAdapter.validate_python(raw)
        trigger.set_deployment_id(uuid.uuid4())
        automation = trigger.as_automation()
        assert automation.name == raw["name"]
        assert automation.description == raw["description"]


@pytest.mark.parametrize("object_name", [
    "data/openmath-v7.parquet",
    'x.parquet", "tpurl.profile": "rehearsal", "y": "',
    'x.parquet"}, "related": [{"prefect.resource.id": "a"}], "z": {"',
    "a\nb\\c</script>.parquet"])
def test_the_cloud_webhook_template_quotes_the_object_name(object_name):
    """Rendered as a Jinja template (Prefect Cloud's webhooks are Jinja; `tojson` is Jinja's
    own filter), docs/how-to/deploy-prefect-cloud.md's template gives one event whose uri is
    the object's full name and whose other fields no object name can change."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    template = heredoc("cloud-webhook", "how-to/deploy-prefect-cloud.md")[1]
    body = {"message": {"attributes": {"bucketId": "my-bucket", "objectId": object_name}}}
    rendered = ImmutableSandboxedEnvironment().from_string(template).render(body=body)
    event = json.loads(rendered)
    assert event["payload"] == {"uri": f"gs://my-bucket/{object_name}"}
    assert event["resource"] == {"prefect.resource.id": "tpurl.dataset.my-bucket",
                                 "tpurl.profile": "qwen3-30b-a3b-v6e-32"}
    assert set(event) == {"event", "resource", "payload"}


def test_the_gke_retrain_evaluates_and_promotes_and_the_plan_prices_it():
    """The retrain deployment's overrides give the tutorial profile an eval section valid for
    GKE: its runs evaluate (on the slice, like training) and promote only a model that is not
    worse; the plan of that profile prices the evaluation. The weekly stays as the tutorial."""
    from flows.backends.gke.infra.cost import cost_plan
    from flows.config import load_profile
    from flows.operations.plan import build_plan, render_text
    from tests.support.profiles import required_overrides

    by_name = {d["name"]: d for d in _config()["deployments"]}
    retrain = by_name["qwen3-30b-a3b-v6e-32-retrain"]["parameters"]
    weekly = by_name["qwen3-30b-a3b-v6e-32-weekly"]["parameters"]
    assert "overrides" not in weekly
    name = retrain["profile"]
    profile = load_profile(name, {**required_overrides(name), **retrain["overrides"]},
                           environ={"HF_TOKEN": "hf_not_a_secret_for_the_plan"})
    rule = profile.promotion_rule
    assert profile.eval is not None and rule is not None and rule.against == "promoted"
    evaluate = next(s for s in cost_plan(profile).stages if s.stage == "evaluate")
    assert evaluate.busy_chip_hours > 0 and evaluate.usd > 0
    text = render_text(profile, build_plan(profile))
    assert f"  evaluate  {evaluate.hours:.2f} h  busy {evaluate.busy_chip_hours:7.1f} chip-h" \
        in text and f"≈ ${evaluate.usd:,.2f}" in text
    assert "evaluate-trained on pathways" in text and "evaluate-base on pathways" in text
    plain = load_profile(name, required_overrides(name),
                         environ={"HF_TOKEN": "hf_not_a_secret_for_the_plan"})
    assert plain.eval is None  # the weekly, as the tutorial runs it


def test_the_docs_own_retrain_pair_pasted_into_prefect_yaml_serves_only_its_profile():
    """docs/how-to/deploy-prefect-cloud.md's pair for the smoke profile, pasted at the end of
    `deployments:` as the page says (it uses the file's anchors): valid deployment triggers,
    aimed at its own retrain deployment, and the webhook's event for that profile reaches its
    dispatcher alone, while the tutorial's event still reaches only the tutorial's."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    pasted = yaml.safe_load(PREFECT_YAML.read_text().rstrip("\n") + "\n\n"
                            + yaml_block("own-retrain-pair", "how-to/deploy-prefect-cloud.md"))
    deployments = {d["name"]: d for d in pasted["deployments"]}
    retrain = deployments["smoke-qwen3-0.6b-v6e-8-retrain"]
    dispatcher = deployments["announce-smoke-qwen3-0.6b-v6e-8-retrain"]
    profile = retrain["parameters"]["profile"]
    assert profile in profile_names()
    assert retrain["work_pool"] == deployments["qwen3-30b-a3b-v6e-32-retrain"]["work_pool"]
    tutorial_trigger = deployments["announce-qwen3-30b-a3b-v6e-32-retrain"]["triggers"][0]
    for raw in dispatcher["triggers"]:
        trigger = DeploymentTriggerAdapter.validate_python(raw)
        trigger.set_deployment_id(uuid.uuid4())
        assert trigger.as_automation().description == raw["description"]
        assert raw["parameters"]["deployment"] == f"rl-post-training/{retrain['name']}"
        assert raw["parameters"]["deployment"] == dispatcher["parameters"]["deployment"]
        assert raw["match"]["tpurl.profile"] == profile
        assert set(raw["parameters"]) == set(tutorial_trigger["parameters"])

    template = heredoc("cloud-webhook", "how-to/deploy-prefect-cloud.md")[1]
    body = {"message": {"attributes": {"bucketId": "corp-data",
                                       "objectId": "datasets/openmath-v8.parquet"}}}
    triggers = [(d["name"], t) for d in pasted["deployments"] for t in d.get("triggers", [])]
    for label, dispatcher_name in ((profile, dispatcher["name"]),
                                   ("qwen3-30b-a3b-v6e-32", DISPATCHERS["qwen3-30b-a3b-v6e-32"])):
        event = json.loads(ImmutableSandboxedEnvironment().from_string(
            template.replace('"qwen3-30b-a3b-v6e-32"', json.dumps(label))).render(body=body))
        received = Event.model_validate(
            {**event, "id": str(uuid.uuid4()), "occurred": "2026-12-05T06:00:00Z"}).receive()
        covering = [name for name, t in triggers
                    if EventTrigger(posture="Reactive", match=t["match"],
                                    expect=set(t["expect"])).covers(received)]
        assert covering == [dispatcher_name], (label, covering)


def test_the_rollback_automation_ships_disabled_and_runs_the_rollback_flow_on_a_regression():
    """The regression example of the file's comment is an event the API accepts; it matches
    the rollback trigger only (disabled), whose parameters are the flow's and render from
    the event's payload."""
    import inspect

    from flows.operations.rollback_flow import rollback_flow

    [deployment] = [d for d in _config()["deployments"]
                    if d["name"] == "rollback-qwen3-30b-a3b-v6e-32"]
    assert deployment["entrypoint"] == "flows/operations/rollback_flow.py:rollback_flow"
    [trigger] = deployment["triggers"]
    assert trigger["enabled"] is False
    assert trigger["expect"] == ["tpurl.model.regressed"]
    assert set(trigger["parameters"]) <= set(inspect.signature(rollback_flow.fn).parameters)
    comment = re.search(r"POST /api/events\n((?:  #   .*\n)+)(?=  # The same rollback)",
                        PREFECT_YAML.read_text())
    assert comment, "prefect.yaml's regression example comment is gone"
    body = json.loads("".join(line.removeprefix("  #   ") + "\n"
                              for line in comment[1].splitlines()))[0]
    body["id"] = str(uuid.uuid4())
    received = Event.model_validate(body).receive()
    covering = [name for name, t in _triggers() if EventTrigger(
        posture="Reactive", match=t["match"], expect=set(t["expect"])).covers(received)]
    assert covering == ["rollback-qwen3-30b-a3b-v6e-32"]
    assert set(body["payload"]) <= {"run", "reason", "source", "metric", "value"}


def _rendered_rollback_parameters(resource: dict[str, str], payload: dict[str, Any]
                                  ) -> dict[str, Any]:
    """The rollback trigger's parameters as Prefect's run-deployment action renders them for
    this event (prefect 3.9.1 server/events/actions.py ``render_parameters``: v1 templates
    upgraded, then hydrated with the event in the Jinja context)."""
    import copy

    from prefect.server.events.actions import RunDeployment
    from prefect.utilities.schema_tools.hydration import HydrationContext, hydrate

    [trigger] = [t for name, t in _triggers() if name == "rollback-qwen3-30b-a3b-v6e-32"]
    parameters = copy.deepcopy(trigger["parameters"])
    RunDeployment._upgrade_v1_templates(parameters)
    event = Event.model_validate({"id": str(uuid.uuid4()), "occurred": "2026-12-06T02:00:00Z",
                                  "event": "tpurl.model.regressed", "resource": resource,
                                  "payload": payload}).receive()
    return hydrate(parameters, HydrationContext(raise_on_error=True, render_jinja=True,
                                                jinja_context={"event": event}))


@pytest.mark.parametrize(("payload", "label", "refused"), [
    ({"run": "run-3", "reason": "canary"}, "team-a", None),
    ({"run": "", "reason": "canary"}, "team-a", "regressed_run: empty"),
    ({"reason": "canary"}, "team-a", "regressed_run: empty"),
    ({"run": None, "reason": "canary"}, "team-a", "regressed_run: empty"),
    ({"run": "run-2", "reason": "canary"}, "team-a", "regressed_run: run run-2 is not"),
    ({"run": "run-3", "reason": "canary"}, None, "event_resource: names model"),
    ({"run": "run-3", "reason": "canary"}, "team-b", "event_resource: names model"),
])
def test_the_rollback_trigger_hands_the_flow_what_its_checks_read(payload, label, refused):
    """The shipped trigger's templates, rendered as Prefect renders them, give the flow's
    checks a string for a missing run or label (never an undefined value, which fails the
    action before any run exists), and the checks refuse exactly what the event contract
    refuses (the champion: run-3 of team-a)."""
    from flows.core.promotion import PromotedModel
    from flows.core.rollback import RollbackRefused, regression_problem, resource_problem

    resource = {"prefect.resource.id": "tpurl.model.team-a"}
    if label is not None:
        resource["tpurl.profile"] = label
    given = _rendered_rollback_parameters(resource, payload)
    assert set(given) == {"regressed_run", "event_resource", "reason"}
    assert isinstance(given["regressed_run"], str)
    assert given["reason"].startswith("regression announced in event ")
    champion = PromotedModel.model_construct(run="run-3")
    try:
        resource_problem("team-a", given["event_resource"])
        regression_problem(champion, given["regressed_run"])
    except RollbackRefused as exc:
        assert refused is not None and str(exc).startswith(refused), exc
    else:
        assert refused is None
