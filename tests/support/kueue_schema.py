"""Kueue v0.17.1's own CRD schemas (v1beta2) for ClusterQueue, LocalQueue and
WorkloadPriorityClass, made strict as the JobSet's are (tests/support/jobset_schema.py), so a
misspelt or misplaced field of the rendered fair queues fails here as kubectl's strict field
validation would fail it.

Source: kubernetes-sigs/kueue tag v0.17.1 (6fcc132c0121b3f5e8b49246fc13e2e66c6f0620),
config/components/crd/bases/kueue.x-k8s.io_{clusterqueues,localqueues,
workloadpriorityclasses}.yaml: each CRD's ``spec.versions[name=v1beta2].schema.
openAPIV3Schema`` (served, storage), by kind, unchanged, in schemas/kueue.v0.17.1.v1beta2.json
(the rest of the CRDs, and their v1beta1 version, are left out: no test needs them)."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema

from tests.support.jobset_schema import _strict

KUEUE_SCHEMAS = Path(__file__).parent / "schemas" / "kueue.v0.17.1.v1beta2.json"


@cache
def _validators() -> dict[str, jsonschema.Draft7Validator]:
    schemas = json.loads(KUEUE_SCHEMAS.read_text())
    return {kind: jsonschema.Draft7Validator(_strict(schema)) for kind, schema in schemas.items()}


def kueue_errors(obj: dict[str, Any]) -> list[str]:
    """Schema errors of one Kueue object ([] = valid); a kind without a schema is an error."""
    validator = _validators().get(obj.get("kind", ""))
    if validator is None:
        return [f"no vendored schema for kind {obj.get('kind')!r}"]
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
            for e in validator.iter_errors(obj)]
