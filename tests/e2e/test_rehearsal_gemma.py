"""The rehearsal of Gemma 3's text model, for real: the family tests of
tests/e2e/test_rehearsal_families.py (which says what they prove and leave out) on
deployments/profiles/rehearsal-gemma.yaml. A module of its own because Gemma 3's run costs
nearly as much as the other families' together, and scripts/test.sh balances its e2e lanes by
module.
"""

from __future__ import annotations

import pytest

from flows.run.result import PipelineResult
from tests.e2e.test_rehearsal_families import (
    run_family,
    test_every_stage_but_evaluation_ran,
    test_the_export_loads_as_the_familys_class_with_trained_weights,
    test_the_tiny_model_is_the_familys_structure,
)

pytestmark = pytest.mark.rehearsal

__all__ = ["test_every_stage_but_evaluation_ran",
           "test_the_export_loads_as_the_familys_class_with_trained_weights",
           "test_the_tiny_model_is_the_familys_structure"]


@pytest.fixture(scope="module")
def family_run(request, prefect_api, tmp_path_factory) -> tuple[str, PipelineResult]:
    return run_family(request, tmp_path_factory, "rehearsal-gemma")
