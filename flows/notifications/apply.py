"""The prefect.yaml step that creates a profile's notification automations.

``flows.notifications.apply.notification_automations`` runs in `prefect deploy` before a
deployment's other steps (its ``build:`` list): a misnamed block stops the deploy before an
image is built or a deployment is created. What it does, in this order:

1. The section: the step's own ``notify`` (a deployment's) or else the profile file's
   ``notify:``; none: nothing is created or removed, and it says so.
2. Every check before any change: the section's shape (flows/config/notify.py), then the
   block asked of the API by type and name: it must exist and have Prefect's ``notify``
   capability (the same test the server's send-notification action makes,
   prefect/server/events/actions.py ``SendNotification._get_notification_block``).
3. One automation per listed event kind (flows/notifications/messages.py), found by its name:
   updated in place (PUT) when there, created when not, extra copies of that name removed;
   the profile's tpurl-notify automations of kinds no longer listed are deleted. Only
   automations carrying this tool's name and tag are touched.

The block's secret is never read here: only its id goes into the automations.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from flows.config.errors import FixableValueError
from flows.config.loading import resolve_profile_path
from flows.config.notify import BLOCK_FIX, NOTIFY_EVENTS, NotifySection
from flows.config.profile_file import read_profile_file
from flows.notifications.messages import TAG, automation_name, automation_spec


class NotifyRefused(ValueError):
    """A notify setting the deploy cannot use; the message names the field and the fix."""


def section_of(profile: str, notify: Mapping[str, Any] | None) -> tuple[str, NotifySection | None]:
    """The profile's name and the section that applies (the deployment's wins)."""
    path = resolve_profile_path(profile)
    data = read_profile_file(path)
    name = path.stem  # a profile's name is its file's (flows/config/loading.py own_name)
    raw = notify if notify else data.get("notify")
    where = "the step's notify" if notify else f"profile {name}'s notify"
    if not raw:
        return name, None
    try:
        return name, NotifySection.model_validate(dict(raw))
    except ValidationError as exc:
        lines = []
        for error in exc.errors():
            field = ".".join(["notify", *(str(p) for p in error["loc"])])
            cause = (error.get("ctx") or {}).get("error")
            if isinstance(cause, FixableValueError):
                lines.append(f"{field}: {cause.problem}; fix: {cause.fix}")
            else:  # never the input: it may be the very URL that belongs in a block
                lines.append(f"{field}: {error['msg']}; fix: see docs/notifications.md")
        raise NotifyRefused(f"{where} is invalid: " + " | ".join(lines)) from None


def check_block(client: Any, section: NotifySection) -> str:
    """The block document's id, or NotifyRefused naming notify.block and the fix."""
    from prefect.exceptions import ObjectNotFound

    try:
        document = client.read_block_document_by_name(section.block_name, section.block_type,
                                                      include_secrets=False)
    except ObjectNotFound:
        raise NotifyRefused(f"notify.block: no block {section.block} on the Prefect API; fix: "
                            f"create it (`prefect block create {section.block_type}`, name "
                            f"{section.block_name}) or correct notify.block ({BLOCK_FIX})"
                            ) from None
    schema = document.block_schema
    if schema is None or "notify" not in (schema.capabilities or []):
        raise NotifyRefused(f"notify.block: {section.block} is not a notification block; fix: "
                            f"{BLOCK_FIX}")
    return str(document.id)


def apply_automations(client: Any, profile: str, section: NotifySection,
                      block_id: str) -> dict[str, str]:
    """Create or update each listed kind, delete the unlisted ones; {name: what was done}."""
    from prefect.events.schemas.automations import AutomationCore

    done: dict[str, str] = {}
    for kind in NOTIFY_EVENTS:
        name = automation_name(profile, kind)
        existing = [a for a in client.read_automations_by_name(name) if TAG in (a.tags or [])]
        if kind not in section.events:
            for automation in existing:
                client.delete_automation(automation.id)
                done[name] = "deleted"
            continue
        spec = AutomationCore.model_validate(automation_spec(profile, kind, block_id,
                                                             section.block))
        if existing:
            client.update_automation(existing[0].id, spec)
            for extra in existing[1:]:
                client.delete_automation(extra.id)
            done[name] = "updated"
        else:
            client.create_automation(spec)
            done[name] = "created"
    return done


def notification_automations(profile: str, notify: Mapping[str, Any] | None = None
                             ) -> dict[str, Any]:
    """prefect.yaml step: ``profile`` (a shipped name or a file) and optionally the
    deployment's own ``notify`` mapping. A refusal ends `prefect deploy` with its message
    alone (a SystemExit passes prefect's step wrapper, as in flows/deploy_steps.py)."""
    from prefect.client.orchestration import get_client

    try:
        name, section = section_of(profile, notify)
        if section is None:
            print(f"notify: off for profile {name} (no notify: section); no automation "
                  "created or changed")
            return {"profile": name, "automations": {}}
        with get_client(sync_client=True) as client:
            block_id = check_block(client, section)
            done = apply_automations(client, name, section, block_id)
    except NotifyRefused as exc:
        print(f"Refused: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
    for automation, what in done.items():
        print(f"notify: {what} automation {automation!r} → {section.block}")
    return {"profile": name, "automations": done}
