"""An example consumer of ``tpurl.model.promoted``: the step that would point a serving
endpoint at the newly promoted model. Here it only records the URI it was given.

Why a flow of its own: the automation in deployments/automations/serve-on-promoted.yaml runs
a deployment of it on every promotion, so serving changes only when the promotion rule
passed, never on a bare export. It records ``served.json`` beside the promoted pointer
(flows/runpage/promotion.py) and refuses a URI that is not the promoted one: an event
replayed late, after a newer promotion, must not roll serving back. The pointer itself lives
in a bucket every training pod can write, so it is checked before anything is served: it must
carry its scores' key and its export's digest, name an export inside the output root, and the
export's files must still give that digest (issue 37.5).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

from prefect import flow, get_run_logger

from flows.backends import backend_for
from flows.config import load_profile
from flows.core.error_redaction import redacting_errors
from flows.core.storage import join
from flows.runpage.promotion import pointer_problem, pointer_uris, read_promoted


@flow(name="record-promoted-model")
@redacting_errors
def record_promoted_model(profile: str, model_uri: str, run: str = "") -> str:
    """Record the promoted model as the one to serve.

    Args:
        profile: The profile whose model was promoted (the event's tpurl.profile label).
        model_uri: The promoted HF export (the event's payload model_uri).
        run: The flow run that produced it (the event's payload run).
    """
    cfg = load_profile(profile)
    storage = backend_for(cfg).storage
    current = read_promoted(storage, cfg)
    if current is None or current.model_uri != model_uri:
        raise ValueError(f"{model_uri} is not the promoted model of {profile} (the pointer "
                         f"says {current.model_uri if current else 'nothing'}); not serving it")
    if why := pointer_problem(storage, cfg, current):
        raise ValueError(f"the promoted pointer of {profile} is not trusted: {why}; not "
                         "serving it. Rerun the pipeline to judge and promote the model again")
    served = join(pointer_uris(cfg)[0].rsplit("/", 1)[0], "served.json")
    storage.write_text(served, json.dumps({"model_uri": model_uri, "run": run,
                                           "recorded_at": datetime.now(UTC).isoformat()}))
    get_run_logger().info("would point the serving endpoint at %s; recorded in %s",
                          model_uri, served)
    return served
