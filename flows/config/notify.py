"""A profile's ``notify`` section: where its messages go and which events send one.

Off by default (no section, no automation). The destination is a Prefect notification block
named by ``<block type slug>/<block name>`` (``slack-webhook/tpurl-alerts``,
``custom-webhook/ops-hook``): the webhook URL or the SMTP password lives in the block, as a
secret field Prefect keeps on the server, never in the profile, prefect.yaml, an event or a
log. Here only the reference's shape is checked (a pasted URL or token is refused without
being echoed); whether the block exists and can notify is asked of the API by the deploy
step (flows.notifications.apply) before it creates anything. Not run-tunable: a run's
overrides cannot redirect alerts.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field

from flows.config.errors import FixableValueError
from flows.config.section_base import StrictModel
from flows.config.types import Checked

NotifyEvent = Literal["run-failed", "model-decided", "capacity-fallback", "retrain-coalesced",
                      "model-rolled-back", "train-suspect", "model-regressed",
                      "retrain-queued", "serving-regressed"]
NOTIFY_EVENTS: tuple[NotifyEvent, ...] = ("run-failed", "model-decided", "capacity-fallback",
                                          "retrain-coalesced", "model-rolled-back",
                                          "train-suspect", "model-regressed",
                                          "retrain-queued", "serving-regressed")
# Prefect block type slugs are lowercase words joined by '-'; a block document's name is
# letters, digits, '-' and '_' (prefect/utilities/names.py's rule for block names)
_BLOCK_REF = re.compile(r"^([a-z0-9]+(?:-[a-z0-9]+)*)/([A-Za-z0-9][A-Za-z0-9_-]{0,99})$")
BLOCK_FIX = ("name a Prefect notification block as TYPE/NAME, e.g. slack-webhook/tpurl-alerts "
             "(created with `prefect block create slack-webhook`, the URL stored in it), or "
             "custom-webhook/NAME for any HTTP endpoint")



def _block_reference(value: str) -> str:
    if "://" in value or "@" in value or not _BLOCK_REF.match(value):
        # never echoed: a webhook URL pasted here is the secret itself
        raise FixableValueError("is not a block reference TYPE/NAME (a URL or a secret does not "
                                "belong in a profile)", BLOCK_FIX)
    return value


def _no_repeats(values: list[NotifyEvent]) -> list[NotifyEvent]:
    if not values:
        raise FixableValueError("lists no event", "remove the notify: section to send nothing, "
                                "or list some of " + ", ".join(NOTIFY_EVENTS))
    return list(dict.fromkeys(values))

class NotifySection(StrictModel):
    block: Annotated[str, Checked(_block_reference, "a block reference TYPE/NAME, no URL or secret",
                                  pattern=_BLOCK_REF)]
    """The Prefect notification block that sends the messages, as TYPE/NAME (e.g.
    slack-webhook/tpurl-alerts); the URL or password is a secret inside the block."""
    events: Annotated[list[NotifyEvent], Checked(
        _no_repeats, "at least one event (repeats are dropped)")] = Field(
        default_factory=lambda: list(NOTIFY_EVENTS))
    """Which events send a message: run-failed (a spend cap reached included),
    model-decided (promoted, held or rejected), capacity-fallback, retrain-coalesced,
    model-rolled-back (`tpurl rollback`), train-suspect (a training-health detector fired),
    model-regressed (a watch's verdict), retrain-queued (the dispatcher created a retrain
    run), serving-regressed (a watch's serving canary scored worse than the champion);
    default all."""



    @property
    def block_type(self) -> str:
        return self.block.split("/", 1)[0]

    @property
    def block_name(self) -> str:
        return self.block.split("/", 1)[1]
