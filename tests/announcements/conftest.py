"""The target deployment the dispatcher's server tests announce to."""

from __future__ import annotations

from uuid import UUID

import pytest

from tests.support.announcements import make_target


@pytest.fixture
def target() -> tuple[str, UUID]:
    """A retrain deployment of the rehearsal profile."""
    return make_target({"profile": "rehearsal"})
