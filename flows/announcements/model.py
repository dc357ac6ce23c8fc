"""What an announcement is, and what a retrain run says it serves (pure).

An announcement is one `tpurl.dataset.updated` or `tpurl.base-model.updated` event: its kind,
its value (the dataset URI or the base-model revision), the event's id (to recognise a
redelivery) and when it *occurred* (announcements are ordered by that, never by arrival:
Prefect's automations may deliver two close events in either order).

A retrain run created by the dispatcher carries a `RunAnnouncement` as its ``announcement``
parameter: the newest announcement of each kind it trains (``serves``) and the ones that were
folded into it (``coalesced``). The runs of a deployment are therefore the ledger of what
was announced; nothing else is stored.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, get_args

from flows.common.paths import path_part
from flows.config.uri_and_revision_rules import COMMIT, shown

# The dispatcher's `kind` parameter is typed by this, so Prefect's run form offers these as a
# choice and its parameter validation refuses any other before the flow starts.
Kind = Literal["dataset", "base-model"]
KINDS: tuple[Kind, ...] = get_args(Kind)
# The retrain flow's parameter each kind fills.
PARAMETER = {"dataset": "dataset_uri", "base-model": "model_revision"}
ANNOUNCED_AS = {"dataset_uri": "the announced dataset", "model_revision": "the announced revision"}



class AnnouncementError(ValueError):
    """A malformed announcement: names the field and the fix."""


def _parse_time(value: Any, name: str) -> datetime:
    if isinstance(value, datetime):
        moment = value
    else:
        try:
            moment = datetime.fromisoformat(str(value).strip())
        except ValueError:
            raise AnnouncementError(
                f"{name}: {value!r} is not an ISO 8601 time; fix: template it as "
                "\"{{ event.occurred | string }}\" in the trigger's parameters") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


@dataclass(frozen=True, order=False)
class Announcement:
    kind: str
    value: str
    event_id: str
    occurred: datetime

    @classmethod
    def of(cls, kind: str, value: Any, event_id: Any, occurred: Any,
           where: str = "announcement") -> Announcement:
        """Checked construction: every refusal names the field and how to fix it."""
        if kind not in KINDS:
            raise AnnouncementError(f"{where}.kind: {kind!r} is not one of {', '.join(KINDS)}; "
                                    "fix: the trigger of tpurl.dataset.updated passes "
                                    "'dataset', that of tpurl.base-model.updated 'base-model'")
        text = "" if value is None else str(value).strip()
        if not text:
            what = "uri" if kind == "dataset" else "revision"
            raise AnnouncementError(f"{where}.value: empty; fix: the event's payload needs a "
                                    f"non-empty '{what}'")
        if kind == "base-model" and not COMMIT.fullmatch(text.lower()):
            raise AnnouncementError(
                f"{where}.value: revision {shown(text)} is not a commit; fix: announce the "
                "full 40-hex commit id on the hub (a branch, tag or refs/pr/N names whatever "
                "someone pushes there next, so it is refused)")
        if kind == "base-model":
            text = text.lower()
        if not event_id or not str(event_id).strip():
            raise AnnouncementError(f"{where}.event_id: empty; fix: template it as "
                                    "\"{{ event.id | string }}\"")
        return cls(kind, text, str(event_id).strip(), _parse_time(occurred, f"{where}.occurred"))

    @property
    def identity(self) -> tuple[str, str, datetime]:
        """What makes two events one announcement whatever their ids: Prefect drops a
        repeated id itself, but an emitter's retry under a new id is the same announcement."""
        return (self.kind, self.value, self.occurred)

    def same_as(self, other: Announcement) -> bool:
        return self.event_id == other.event_id or self.identity == other.identity

    @property
    def order(self) -> tuple[datetime, str]:
        """Newer sorts later; the event id breaks a tie so every dispatcher agrees."""
        return (self.occurred, self.event_id)

    def newer_than(self, other: Announcement | None) -> bool:
        return other is None or self.order > other.order

    def to_dict(self) -> dict[str, str]:
        return {"kind": self.kind, "value": self.value, "event_id": self.event_id,
                "occurred": self.occurred.isoformat()}

    @classmethod
    def from_dict(cls, data: Any, where: str) -> Announcement:
        if not isinstance(data, dict):
            raise AnnouncementError(f"{where}: expected a mapping with kind, value, event_id "
                                    f"and occurred, got {type(data).__name__}")
        return cls.of(data.get("kind", ""), data.get("value"), data.get("event_id"),
                      data.get("occurred"), where)

    def describe(self) -> str:
        return f"{self.kind} {self.value} (event {self.event_id}, {self.occurred.isoformat()})"


@dataclass(frozen=True)
class RunAnnouncement:
    """The ``announcement`` parameter of a retrain run."""

    serves: dict[str, Announcement] = field(default_factory=dict)
    coalesced: tuple[Announcement, ...] = ()

    def event_ids(self) -> set[str]:
        return {a.event_id for a in self.serves.values()} | {a.event_id for a in self.coalesced}

    def parameters(self) -> dict[str, Any]:
        """The retrain flow's parameters: one per kind served, plus this record."""
        params: dict[str, Any] = {PARAMETER[k]: a.value for k, a in self.serves.items()}
        params["announcement"] = self.to_dict()
        return params

    def to_dict(self) -> dict[str, Any]:
        return {"serves": {k: a.to_dict() for k, a in sorted(self.serves.items())},
                "coalesced": [a.to_dict() for a in self.coalesced]}

    @classmethod
    def from_dict(cls, data: Any, where: str = "announcement") -> RunAnnouncement:
        if not isinstance(data, dict):
            raise AnnouncementError(f"{where}: expected a mapping with 'serves' and "
                                    f"'coalesced', got {type(data).__name__}")
        serves_in = data.get("serves") or {}
        if not isinstance(serves_in, dict):
            raise AnnouncementError(f"{where}.serves: expected a mapping of kind to "
                                    "announcement")
        serves = {}
        for kind, item in serves_in.items():
            found = Announcement.from_dict(item, f"{where}.serves.{kind}")
            if found.kind != kind:
                raise AnnouncementError(f"{where}.serves.{kind}: holds a {found.kind} "
                                        "announcement; fix: key each one by its kind")
            serves[kind] = found
        coalesced_in = data.get("coalesced") or []
        if not isinstance(coalesced_in, list):
            raise AnnouncementError(f"{where}.coalesced: expected a list of announcements")
        coalesced = tuple(Announcement.from_dict(item, f"{where}.coalesced[{i}]")
                          for i, item in enumerate(coalesced_in))
        return cls(serves, coalesced)

    def parameters_problem(self, given: Mapping[str, Any],
                           declared: Mapping[str, Any]) -> str | None:
        """Why a run holding this announcement would train something else, with the fix;
        None when it trains exactly what it serves (pure). ``given``: the run's
        ``dataset_uri``, ``model_revision`` and ``overrides``; ``declared``: the
        deployment's own parameters. A kind it serves is trained at the announced value; a
        kind it does not serve, and the overrides, at the deployment's (as the dispatcher
        creates the run): a run's parameters are whoever created it's, and the record
        vouches for the announcement only."""
        expected: dict[str, Any] = {name: declared.get(name) for name in PARAMETER.values()}
        expected |= {PARAMETER[kind]: item.value for kind, item in self.serves.items()}
        expected["overrides"] = declared.get("overrides") or {}
        for name, value in expected.items():
            got = given.get(name) or ({} if name == "overrides" else None)
            if got != (value or ({} if name == "overrides" else None)):
                what = ANNOUNCED_AS.get(name, "the deployment's") if name in {
                    PARAMETER[k] for k in self.serves} else "the deployment's"
                return (f"{name}: differs from {what} on a run that holds announcements "
                        f"{', '.join(sorted(self.event_ids()))}; fix: leave {name} as the "
                        "dispatcher set it (run the deployment without the announcement "
                        "parameter to train another value)")
        return None

    def summary(self) -> dict[str, Any]:
        """Flat, for event payloads: what is served and which event ids were folded in."""
        out: dict[str, Any] = {}
        for kind, item in sorted(self.serves.items()):
            out[kind] = item.value
            out[f"{kind}_event"] = item.event_id
            out[f"{kind}_occurred"] = item.occurred.isoformat()
        out["coalesced"] = [f"{a.kind} {a.value} ({a.event_id})" for a in self.coalesced]
        return out

    def label(self) -> str:
        """Short text for a run name: the dataset file's name and/or the revision."""
        parts = []
        if (data := self.serves.get("dataset")) is not None:
            parts.append(path_part(data.value.rstrip("/").rsplit("/", 1)[-1], "data"))
        if (model := self.serves.get("base-model")) is not None:
            parts.append(f"rev-{path_part(model.value[:12], 'x')}")
        return "+".join(parts)


NAME_VALUE_CHARS = 48


def name_part(value: str, limit: int = NAME_VALUE_CHARS) -> str:
    """Untrusted text (a URI, a revision) as a part of a run name: the scheme kept (so gs://
    and file:// differ), never a '/' (run names end in file names: results, tracebacks),
    no control characters, and a middle ellipsis when long, keeping the start and the file
    name at the end."""
    scheme, sep, rest = value.partition("://")
    if not sep:
        scheme, rest = "", value
    rest = "".join("›" if c in "/\\" else ("_" if ord(c) < 32 or c == "\x7f" else c)
                   for c in rest.strip("/"))
    if rest in {".", ".."}:
        rest = rest.replace(".", "_")
    head = f"{scheme}:" if scheme else ""
    room = max(limit - len(head), 8)
    if len(rest) > room:
        keep_end = (room - 1) * 2 // 3
        rest = rest[:room - 1 - keep_end] + "…" + rest[-keep_end:]
    return head + rest


def dispatcher_run_name(kind: object, value: object) -> str:
    """The dispatcher run's name in the UI: what was announced, e.g.
    ``announce-dataset-gs:bucket›data›openmath-v7.parquet``."""
    return f"announce-{name_part(str(kind), 12)}-{name_part(str(value))}"


def retrain_run_name(profile: str, record: RunAnnouncement | None, stamp: str = "") -> str:
    """The retrain run's name in the UI: the profile and what it was announced for."""
    label = record.label() if record is not None else ""
    return path_part("-".join(part for part in (profile, label, stamp) if part))
