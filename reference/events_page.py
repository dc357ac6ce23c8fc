"""Every ``tpurl.*`` event, from the catalogue the emitters use
(flows/common/event_catalogue.py): its resource, labels, payload keys and when it fires."""

from __future__ import annotations

from flows.common.event_catalogue import CATALOGUE, EventKind
from reference.markdown import cell, table


def _keys(kind: EventKind) -> str:
    keys = [f"`{key}`" for key in kind.required] + [f"`{key}` (optional)"
                                                     for key in kind.optional]
    return ", ".join(keys) or "none"


def render() -> str:
    lines = ["# Events", "",
             "Generated from `flows/common/event_catalogue.py` by `python -m reference`; "
             "do not edit by hand. Names and payload keys are stable: automations and other "
             "deployments match on them. A trigger selects a target with the resource's "
             "labels (`match`), a cause with a payload key such as `code`. Prefect adds the "
             "emitting flow run (and task run) as related resources; payloads are redacted "
             "like every log.", ""]
    families: dict[str, list[EventKind]] = {}
    for kind in CATALOGUE:
        families.setdefault(kind.name.split(".")[1], []).append(kind)
    for family, kinds in families.items():
        lines += [f"## `tpurl.{family}.*`", ""]
        lines += table(["event", "resource", "labels", "payload keys", "emitted by", "when"],
                       [[f"`{k.name}`", f"`{k.resource}`",
                         ", ".join(f"`{label}`" for label in k.labels), _keys(k),
                         f"`{k.emitter}`", cell(k.when)] for k in kinds])
        lines.append("")
    return "\n".join(lines)
