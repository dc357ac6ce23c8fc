"""One run per profile: the flow holds a global concurrency slot named after the profile."""

from __future__ import annotations

import logging

from prefect import flow
from prefect.client.orchestration import get_client

from flows.profile_lock import lock_name, profile_lock


def test_lock_is_created_with_one_slot_and_held_while_running(prefect_api):
    seen = {}

    @flow
    def holder() -> None:
        with profile_lock("Rehearsal X", logging.getLogger("t")), get_client(sync_client=True) as c:
            seen["inside"] = c.read_global_concurrency_limit_by_name(lock_name("Rehearsal X"))

    holder()
    with get_client(sync_client=True) as client:
        after = client.read_global_concurrency_limit_by_name("tpurl-profile-rehearsal-x")
    assert seen["inside"].limit == 1 and seen["inside"].active_slots == 1
    assert after.active_slots == 0
