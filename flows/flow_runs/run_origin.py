"""Who is running the flow: the owner of the profile, or a deployment's run.

A flow called in-process (`tpurl run`, `tpurl teardown`, Python) is its caller's: every
override is theirs to make. A run of a deployment was created through the Prefect API (the
run form, `prefect deployment run`, an automation, the announcement dispatcher) by whoever
can reach it, so its ``overrides`` may change only run-tunable fields
(flows/config/run_overrides.py), and its job variables and ``profile`` only repeat what the
deployment declared (flows/deployed/run_choices.py). A flow run no deployment owns cannot be
started by a worker: prefect 3.9.1 prefect/flows.py ``load_flow_from_flow_run`` (line 3248)
raises "Flow run does not have an associated deployment", so the deployment id decides.
"""

from __future__ import annotations

from typing import Any

from prefect.runtime import deployment

from flows.config.loading import Origin
from flows.deployed.declared import Declared


def run_origin() -> Origin:
    """"deployment" inside a deployment's flow run, else "flow" (an in-process call)."""
    return "deployment" if deployment.id else "flow"


# The retrain flow's parameters that set a profile field (flows/pipeline.py).
FIELD_PARAMETERS = {"dataset_uri": "data.train_files", "model_revision": "model.hf_revision"}


def deployed_fields(declared: Declared) -> dict[str, Any]:
    """The profile fields a deployment itself sets (pure): its ``overrides`` parameter, with
    its own ``dataset_uri`` and ``model_revision`` as the fields they set
    (FIELD_PARAMETERS). prefect.yaml's, the deploying operator's, trusted as the profile is,
    as opposed to the run's."""
    fields = declared.overrides
    fields.update({field: declared.parameters[name] for name, field in FIELD_PARAMETERS.items()
                   if declared.parameters.get(name)})
    return fields

