"""Fixtures for the GKE backend tests: the tutorial profile."""

from __future__ import annotations

import pytest

from flows.config import Profile
from tests.support.profiles import tutorial_profile


@pytest.fixture
def profile() -> Profile:
    return tutorial_profile()
