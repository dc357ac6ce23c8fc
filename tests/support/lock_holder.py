"""A real process that holds a profile's lock in a real flow run, for the lock's
interleaving tests: ``python -m tests.support.lock_holder PROFILE HOLD_S [--pause-record S]
[--pause-release S] [--hang-before-record] [--until-told] [--renew-s S]``.

The pauses stretch the windows between the lock's own API calls (slot taken → record
written; record marked released → slot released) by wrapping the Prefect client's methods
in this process only; the API and the waiter are untouched. Progress goes to stdout, one
word a line with this process's clock (``WORD UNIX_TIME``), flushed: TAKEN, HOLDING,
RELEASING, DONE. The time is taken where the word is said, so a test compares its waiter
against the holder's own moments, not against when it happened to read the line.
With ``--until-told`` the holder holds until a line arrives on stdin (HOLD_S at most), so a
test ends the hold when it has seen what it waits for, however slow the machine.
``--renew-s`` renews the lease every S seconds instead of the lock's ``RENEW_S`` (20 s), in
this process only: a test of what a renewal does or finds sees its renewals in seconds.
"""

from __future__ import annotations

import argparse
import logging
import select
import sys
import time
from typing import Any

from prefect import flow
from prefect.client.orchestration import SyncPrefectClient


def say(word: str) -> None:
    print(f"{word} {time.time():.3f}", flush=True)


def _wrap(name: str, before: Any = None, after: Any = None) -> None:
    original = getattr(SyncPrefectClient, name)

    def wrapped(self: SyncPrefectClient, *args: Any, **kwargs: Any) -> Any:
        if before:
            before(args, kwargs)
        result = original(self, *args, **kwargs)
        if after:
            after(args, kwargs)
        return result

    setattr(SyncPrefectClient, name, wrapped)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("profile")
    parser.add_argument("hold_s", type=float)
    parser.add_argument("--pause-record", type=float, default=0.0)
    parser.add_argument("--pause-release", type=float, default=0.0)
    parser.add_argument("--hang-before-record", action="store_true")
    parser.add_argument("--until-told", action="store_true")
    parser.add_argument("--renew-s", type=float)
    opts = parser.parse_args()
    if opts.renew_s is not None:
        from flows.locking import lock_rules

        lock_rules.RENEW_S = opts.renew_s

    taken = {"said": False}

    def before_record(args: Any, kwargs: Any) -> None:
        if not taken["said"]:
            taken["said"] = True
            say("TAKEN")
            if opts.hang_before_record:
                time.sleep(3600)  # the test kills this process here
            time.sleep(opts.pause_record)

    def after_release_mark(args: Any, kwargs: Any) -> None:
        variable = args[0] if args else kwargs.get("variable")
        value = getattr(variable, "value", None)
        if isinstance(value, dict) and value.get("state") == "released":
            say("RELEASING")
            time.sleep(opts.pause_release)

    def after_delete(args: Any, kwargs: Any) -> None:  # a lock that releases by deleting its record
        say("RELEASING")
        time.sleep(opts.pause_release)

    _wrap("create_variable", before=before_record)
    _wrap("update_variable", before=before_record, after=after_release_mark)
    _wrap("delete_variable_by_name", after=after_delete)

    from flows.locking.profile_lock import profile_lock

    @flow(name="lock-holder")
    def hold() -> None:
        with profile_lock(opts.profile, logging.getLogger("holder")):
            say("HOLDING")
            if opts.until_told:
                select.select([sys.stdin], [], [], opts.hold_s)
            else:
                time.sleep(opts.hold_s)

    hold()
    say("DONE")


if __name__ == "__main__":
    sys.exit(main())
