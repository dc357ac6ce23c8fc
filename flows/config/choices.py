"""Parameter types whose JSON schema offers the shipped profiles as choices.

The deployment's run form renders an ``enum`` as a drop-down, and the server checks a
deployment run's parameters against the schema; the flow itself (``tpurl run``, in-process
with pydantic) still takes a path, since ``json_schema_extra`` is not validated there.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from flows.config.loading import profile_names

ProfileName = Annotated[str, Field(json_schema_extra={"enum": profile_names()})]
