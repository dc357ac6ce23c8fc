from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fakes.kube_api import FakeApiServer, FakeKube


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    """A fresh fake Kubernetes API server (test_faults.py adds an HF token to its own)."""
    with FakeApiServer(FakeKube()) as srv:
        yield srv
