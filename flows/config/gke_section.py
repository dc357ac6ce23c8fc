"""The profile's gke section, narrowed once for code that only runs for a GKE profile.

A profile holds a gke or a local section, so its type says ``GkeSection | None``. The GKE
backend's code, the plan's costs, teardown and status are only ever given a profile whose
backend is gke (``backend_for`` is the one place a backend is chosen, and the profile's
validator refuses ``backend: gke`` without the section). Such code handed another profile is
a caller's bug: it gets a ValueError naming the field and the fix, not an assert that
``python -O`` would skip. A leaf module (its imports are for the type checker only), so the
config modules the profile itself is built from can use it too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from flows.config.gke import GkeSection
    from flows.config.profile import Profile


def gke_section(profile: Profile) -> GkeSection:
    """``profile.gke``, which GKE code may rely on."""
    if profile.gke is None:
        raise ValueError(f"profile {profile.name!r} (backend {profile.backend}) has no gke "
                         "section, which this needs: give it a gke: section and backend: "
                         "gke, or run it with the local backend")
    return profile.gke
