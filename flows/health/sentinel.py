"""What the training sentinel does with its detectors' findings: the profile's policy per
detector (flows/config/health.py), the ``tpurl.train.suspect`` event, the log line.

``judge`` is pure: findings and the health section in, each finding with its policy out. A
finding whose policy is ``stop`` that is only seen after the training ended (the rehearsal,
whose local programs have no live watch; or a detector whose evidence arrived with the last
step) can stop nothing any more: it holds the promotion instead, so a stop is never weaker
than a hold. Emitting is best-effort like every event of a run: the finding is also in the
log, the result and the run page.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

from flows.common.event_catalogue import TRAIN_SUSPECT
from flows.config.health import HealthSection, Policy
from flows.health.detectors import Finding, Steps, examine

log = logging.getLogger(__name__)
_LOCK = threading.Lock()
_ANNOUNCED: dict[tuple[str, str], set[str]] = {}  # (profile, run) -> detectors announced
HOLDING: frozenset[Policy] = frozenset({"hold", "stop"})


def judge(findings: Sequence[Finding], health: HealthSection) -> list[dict[str, Any]]:
    """Each finding's payload with its ``policy`` (pure)."""
    return [{**f.payload(), "policy": health.policy_of(f.detector)} for f in findings]


def holding(judged: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The judged findings that hold a passing promotion (hold, and stop seen too late)."""
    return [f for f in judged if f.get("policy") in HOLDING]


def heldout_gain(evaluation: dict[str, Any], metric: str) -> float | None:
    """Trained minus base on the held-out rows, by the promotion rule's metric; None when
    the evaluation does not carry both."""
    try:
        trained = evaluation["trained"][metric]["value"]
        base = evaluation["base"][metric]["value"]
        return float(trained) - float(base)
    except (KeyError, TypeError, ValueError):
        return None


def after_training(steps: Steps, health: HealthSection,
                   heldout: float | None = None) -> list[dict[str, Any]]:
    """The judged findings over a finished training's steps (pure)."""
    return judge(examine(steps, health, heldout), health)


def suspect_event(profile: str, run: str, judged: dict[str, Any],
                  spend_saved: float | None = None) -> dict[str, Any]:
    """The event's name, resource and checked payload, for ``emit_event``."""
    payload = {**judged, "run": run}
    if spend_saved is not None:
        payload["spend_saved"] = round(spend_saved, 2)
    return {"event": TRAIN_SUSPECT.name,
            "resource": {"prefect.resource.id": f"tpurl.train.{profile}",
                         "prefect.resource.name": f"{profile} training",
                         "tpurl.profile": profile, "tpurl.detector": str(judged["detector"])},
            "payload": TRAIN_SUSPECT.checked(payload)}


def announce(profile: str, run: str, judged: Sequence[dict[str, Any]],
             warn: Callable[[str], None], spend_saved: float | None = None) -> None:
    """Log each finding and emit its event, once per detector and run in this process (the
    GKE watch announces while training, the flow again after it: the second is dropped);
    ``spend_saved``: what a stop saved."""
    from prefect.events import emit_event
    from prefect.settings import PREFECT_API_URL

    for finding in judged:
        with _LOCK:
            seen = _ANNOUNCED.setdefault((profile, run), set())
            if finding["detector"] in seen:
                continue
            seen.add(str(finding["detector"]))
        warn(f"training health: {finding['detector']} at step {finding['step']} "
             f"(policy {finding['policy']}): {finding['summary']}")
        if not PREFECT_API_URL.value():  # Prefect would start a server of its own for it
            log.warning("no Prefect API: %s for %s is in the log and on the run page only",
                        TRAIN_SUSPECT.name, finding["detector"])
            continue
        try:
            body = suspect_event(profile, run, finding, spend_saved)
            emit_event(event=TRAIN_SUSPECT.name, resource=body["resource"],
                       payload=body["payload"])
        except Exception as exc:  # an event is a notice; the log and the page say it too
            log.warning("could not emit %s: %s", TRAIN_SUSPECT.name, exc)
