"""Parameter types whose JSON schema offers the shipped profiles as choices.

The deployment's run form renders an ``enum`` as a drop-down, and the server checks a
deployment run's parameters against the schema; the flow itself (``tpurl run``, in-process
with pydantic) still takes a path, since ``json_schema_extra`` is not validated there.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from flows.common.paths import PROFILES_DIR
from flows.config.profile_file import profile_names, read_profile_file


def gke_profile_names() -> list[str]:
    """The shipped profiles on the GKE backend: the only ones a teardown can act on (the
    rehearsal has no cluster). Read from each file's ``backend`` field, unvalidated: the
    choice list must not depend on the required gke fields being set."""
    def backend(name: str) -> object:
        return read_profile_file(PROFILES_DIR / f"{name}.yaml").get("backend")

    return [name for name in profile_names() if backend(name) == "gke"]


ProfileName = Annotated[str, Field(json_schema_extra={"enum": profile_names()})]
GkeProfileName = Annotated[str, Field(json_schema_extra={"enum": gke_profile_names()})]
