"""The Vertex AI Model Registry: a promoted export becomes a version of one
model, the export as its artifact URI and the scores as labels.

Over Vertex AI's REST surface (google/cloud/aiplatform/v1/model_service.proto:
``POST v1/{parent=projects/*/locations/*}/models:upload`` with an ``UploadModelRequest``
{modelId | parentModel, model}; the answer is a long-running Operation whose response is an
``UploadModelResponse`` {model, modelVersionId}), through an authorized session: the
google-auth the GCP extra brings, no aiplatform SDK. The model's id is derived from its
display name, so the first upload creates it (``modelId``) and every later one adds a
version to it (``parentModel``).

An upload is made once per flow run, however often it is tried: a try whose request the
service carried out but whose answer was lost (a timeout, a dropped connection) must not
leave a second version behind when ``reporting.report`` tries again. Every version carries
the flow run's id as the label ``tpurl-flow-run``, and before uploading, the model's versions
with that label are looked up (``GET v1/{model}:listVersions`` with ``filter=
labels.tpurl-flow-run="ID"``, every page; model_service.proto ListModelVersionsRequest): one
found is the answer. A try made while the first one's operation is still running finds
nothing yet; the label then tells the two versions apart.

The champion is the version alias ``champion`` (google/cloud/aiplatform/v1/model.proto
``version_aliases``: unique within a model; google/cloud/aiplatform/v1/model_service.proto
``MergeVersionAliases`` POST v1/{name=projects/*/locations/*/models/*}:mergeVersionAliases
with ``versionAliases``, a ``-`` prefix removing one), so a server reads
``models/ID@champion`` and a rollback moves it back. Moving it takes it off the version that
holds it first, then puts it on the new one: whether Vertex AI moves an alias given to a
second version or refuses it is not documented, and this order is right under either. A
rerun after a failure in between finds the alias on no version and adds it.
"""

from __future__ import annotations

import re
import time
from typing import Any

from flows.config.registry import VertexRegistry
from flows.integrations.judged_model import JudgedModel

POLL_S = 5.0
POLL_LIMIT_S = 1800.0
_LABEL = re.compile(r"[^a-z0-9_-]")
RUN_LABEL = "tpurl-flow-run"
CHAMPION_ALIAS = "champion"


def label(text: str) -> str:
    """Any text as a Vertex label key or value: lowercase letters, digits, _ and -, at most
    63 characters (a score 0.6125 becomes 0_6125). Pure."""
    return _LABEL.sub("_", text.lower())[:63]


def model_id(display_name: str) -> str:
    """The model's resource id: [a-z0-9_-], a letter first, at most 63. Pure."""
    slug = label(display_name).strip("_-") or "model"
    return (slug if slug[0].isalpha() else f"m-{slug}")[:63]


def upload_body(config: VertexRegistry, model: JudgedModel) -> dict[str, Any]:
    """The UploadModelRequest's ``model``: the export as artifact URI, scores as labels."""
    labels = {"tpurl-profile": label(model.profile), "tpurl-decision": model.decision,
              RUN_LABEL: label(model.flow_run_id), "tpurl-run": label(model.run),
              **{label(f"score-{k}"): label(f"{v:.4f}") for k, v in model.scores.items()},
              **{label(f"base-{k}"): label(f"{v:.4f}") for k, v in model.base_scores.items()}}
    return {"displayName": config.display_name, "artifactUri": model.export_uri,
            "containerSpec": {"imageUri": config.serving_image},
            "labels": labels, "versionDescription": f"{model.run}: {model.reason}"[:1000]}


def upload_version(config: VertexRegistry, model: JudgedModel, session: Any = None,
                   sleep: Any = time.sleep) -> str:
    """The new version's resource name (``projects/…/models/ID@VERSION``)."""
    session = session or authorized_session()
    api = f"https://{config.location}-aiplatform.googleapis.com/v1"
    parent = f"projects/{config.project}/locations/{config.location}"
    mid = model_id(config.display_name)
    existing = session.get(f"{api}/{parent}/models/{mid}")
    request: dict[str, Any] = {"model": upload_body(config, model)}
    if existing.status_code == 404:
        request["modelId"] = mid
    else:
        existing.raise_for_status()
        request["parentModel"] = f"{parent}/models/{mid}"
        if made := _version_of_run(session, f"{api}/{parent}/models/{mid}", model.flow_run_id):
            return made
    response = session.post(f"{api}/{parent}/models:upload", json=request)
    response.raise_for_status()
    operation = response.json()
    waited = 0.0
    while not operation.get("done"):
        if waited > POLL_LIMIT_S:
            raise TimeoutError(f"Vertex AI upload {operation.get('name')} not done in "
                               f"{POLL_LIMIT_S:.0f} s")
        sleep(POLL_S)
        waited += POLL_S
        polled = session.get(f"{api}/{operation['name']}")
        polled.raise_for_status()
        operation = polled.json()
    if "error" in operation:
        raise RuntimeError(f"Vertex AI upload failed: {operation['error'].get('message')}")
    result = operation["response"]
    return f"{result['model']}@{result['modelVersionId']}"


def promote_version(config: VertexRegistry, model: JudgedModel, session: Any = None,
                    sleep: Any = time.sleep) -> str:
    """Upload the promoted export (once per flow run) and make it the champion."""
    session = session or authorized_session()
    name = upload_version(config, model, session, sleep)
    move_champion(config, name, session)
    return name


def _api(config: VertexRegistry) -> str:
    return f"https://{config.location}-aiplatform.googleapis.com/v1"


def model_name(config: VertexRegistry) -> str:
    return (f"projects/{config.project}/locations/{config.location}/models/"
            f"{model_id(config.display_name)}")


def promoted_version(config: VertexRegistry, run: str, session: Any = None) -> str | None:
    """``name@version`` of the newest version a run's promotion uploaded (its ``tpurl-run``
    label), or None: what a rollback to that run moves the champion to."""
    session = session or authorized_session()
    url = f"{_api(config)}/{model_name(config)}"
    params = {"filter": f'labels.tpurl-run="{label(run)}"'}
    found: list[int] = []
    while True:
        page = session.get(f"{url}:listVersions", params=params)
        if page.status_code == 404:
            return None
        page.raise_for_status()
        body = page.json()
        found += [int(v["versionId"]) for v in body.get("models", [])
                  if v.get("labels", {}).get("tpurl-run") == label(run)
                  and v.get("labels", {}).get("tpurl-decision") == "promoted"]
        if not (token := body.get("nextPageToken")):
            break
        params = {**params, "pageToken": token}
    return f"{model_name(config)}@{max(found)}" if found else None


def move_champion(config: VertexRegistry, version: str, session: Any = None) -> None:
    """Put the ``champion`` alias on ``version`` (``name@ID``), off the version holding it."""
    session = session or authorized_session()
    api = _api(config)
    name, _, version_id = version.partition("@")
    holder = session.get(f"{api}/{name}@{CHAMPION_ALIAS}")
    if holder.status_code != 404:
        holder.raise_for_status()
        held = str(holder.json().get("versionId", ""))
        if held == version_id:
            return
        off = session.post(f"{api}/{name}@{held}:mergeVersionAliases",
                           json={"versionAliases": [f"-{CHAMPION_ALIAS}"]})
        off.raise_for_status()
    on = session.post(f"{api}/{version}:mergeVersionAliases",
                      json={"versionAliases": [CHAMPION_ALIAS]})
    on.raise_for_status()


def _version_of_run(session: Any, model_url: str, flow_run_id: str) -> str | None:
    """``name@version`` of the model's version an earlier try of this flow run made."""
    params = {"filter": f'labels.{RUN_LABEL}="{label(flow_run_id)}"'}
    while True:
        page = session.get(f"{model_url}:listVersions", params=params)
        page.raise_for_status()
        body = page.json()
        for version in body.get("models", []):
            if version.get("labels", {}).get(RUN_LABEL) == label(flow_run_id):
                return f"{version['name'].split('@', 1)[0]}@{version['versionId']}"
        if not (token := body.get("nextPageToken")):
            return None
        params = {**params, "pageToken": token}


def authorized_session() -> Any:
    """A requests session with the environment's Google credentials (Vertex AI's REST API)."""
    import google.auth
    from google.auth.transport.requests import AuthorizedSession

    credentials, _ = google.auth.default(scopes=["https://www.googleapis.com/auth/cloud-platform"])
    return AuthorizedSession(credentials)
