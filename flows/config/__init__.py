"""Profiles: the typed, validated description of one pipeline (what the tutorial's env vars were)."""

from flows.common.issues import Issue
from flows.config.errors import ProfileError
from flows.config.loading import load_profile
from flows.config.profile import Profile
from flows.config.profile_file import profile_names

__all__ = ["Issue", "Profile", "ProfileError", "load_profile", "profile_names"]
