"""Profiles: the typed, validated description of one pipeline (what the tutorial's env vars were)."""

from flows.common.issues import Issue
from flows.config.errors import ProfileError
from flows.config.loading import load_profile, profile_names
from flows.config.profile import Profile

__all__ = ["Issue", "Profile", "ProfileError", "load_profile", "profile_names"]
