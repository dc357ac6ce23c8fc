"""The profile's gke section, narrowed once for the GKE code that is handed a profile.

A profile may hold a gke or a local section (flows/config/profile.py), so its type says
``GkeSection | None``; every module under flows/backends/gke is only ever given a profile
whose backend is gke (``backend_for`` in flows/backends/__init__.py is the one place a
backend is chosen, and the profile's own validator refuses ``backend: gke`` without the
section). A GKE function handed another profile is a caller's bug: it gets a ValueError that
names the field and the fix, not an AssertionError that ``python -O`` would skip.
"""

from __future__ import annotations

from flows.config.gke import GkeSection
from flows.config.profile import Profile


def gke_section(profile: Profile) -> GkeSection:
    """``profile.gke``, which GKE code may rely on."""
    if profile.gke is None:
        raise ValueError(f"profile {profile.name!r} (backend {profile.backend}) has no gke "
                         "section, which the GKE backend's code needs: give it a gke: "
                         "section and backend: gke, or run it with the local backend")
    return profile.gke
