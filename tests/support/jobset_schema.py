"""The real JobSet v0.10.1 CRD schema (schemas/), made strict, and the Kubernetes version
whose own schemas the rendered Jobs are checked against."""

from __future__ import annotations

import copy
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml

SCHEMA_DIR = Path(__file__).parent / "schemas"
JOBSET_CRD = SCHEMA_DIR / "jobset.x-k8s.io_jobsets.v0.10.1.yaml"
# The GKE REGULAR channel's minor at the time of the tutorial; native sidecars and Job
# podFailurePolicy are GA there.
KUBERNETES_VERSION = "1.33.0"


def _strict(schema: Any) -> Any:
    """The CRD schema with unknown fields rejected, as the API server does with strict field
    validation (kubectl's default): a structural schema prunes them silently otherwise, which
    is how a typo or a field of a newer JobSet would go unnoticed."""
    if isinstance(schema, dict):
        out = {key: _strict(value) for key, value in schema.items()}
        if ("properties" in out and "additionalProperties" not in out
                and not out.get("x-kubernetes-preserve-unknown-fields")):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_strict(item) for item in schema]
    return schema


@cache
def jobset_validator() -> jsonschema.Draft7Validator:
    crd = yaml.safe_load(JOBSET_CRD.read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha2"]
    schema = _strict(copy.deepcopy(version["schema"]["openAPIV3Schema"]))
    return jsonschema.Draft7Validator(schema)


def jobset_errors(obj: dict[str, Any]) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
            for e in jobset_validator().iter_errors(obj)]
