"""At most one run per profile at a time, across every deployment and the CLI.

Two runs of one profile would write the same output directories (same keys). A deployment's
own concurrency limit only covers that deployment (the scheduled one and the retraining one
are two), so the flow also holds a Prefect global concurrency slot named after the profile;
a second run waits for it. Slots are leased, so a crashed holder frees it when its lease ends.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from prefect.client.orchestration import get_client
from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
from prefect.concurrency.sync import concurrency
from prefect.exceptions import ObjectNotFound

from flows.runpage.artifacts import slug


def lock_name(profile: str) -> str:
    return f"tpurl-profile-{slug(profile)}"


@contextlib.contextmanager
def profile_lock(profile: str, logger: Any) -> Iterator[None]:
    name = lock_name(profile)
    try:
        with get_client(sync_client=True) as client:
            try:
                client.read_global_concurrency_limit_by_name(name)
            except ObjectNotFound:
                client.create_global_concurrency_limit(GlobalConcurrencyLimitCreate(name=name, limit=1))
    except Exception as exc:  # a missing lock must not stop a run; say so
        logger.warning("no per-profile lock (%s): concurrent runs of %s are not prevented", exc, profile)
        yield
        return
    logger.info("holding %s (one run of this profile at a time)", name)
    with concurrency(name, occupy=1, strict=True):
        yield
