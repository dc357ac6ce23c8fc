"""`tpurl rollback PROFILE [--to RUN] --reason TEXT`: make an earlier promoted model the
champion again, everywhere the promotion wrote.

Every check comes before any change: the history, the target (flows/core/rollback.py), the
target's export still in storage with the digest it was promoted with, and, where the
profile registers models in MLflow, the version its promotion registered. Then, in this
order: the MLflow alias ``champion`` (idempotent: a rollback that stops after it changes
nothing a rerun would not), the history and the pointer (flows/core/promotion_store.py, the
pointer last), and the event ``tpurl.model.rolled-back`` on the Prefect API, which the
profile's notify automation (notify.events: model-rolled-back) turns into a message.
The Hub needs nothing: a promotion uploads each run's model to a branch named after the run
(flows/integrations/hub_registry.py) and marks no champion there, so the restored run's
branch is as it was. In Vertex AI the champion is the version alias ``champion``
(flows/integrations/vertex_registry.py); a rollback moves it to the version the restored
run's promotion uploaded, before the history and pointer, like MLflow's alias.
"""

from __future__ import annotations

import os
import pwd
import sys
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from flows.backends import storage_for
from flows.common.event_catalogue import MODEL_ROLLED_BACK, EventKind
from flows.config import ProfileError, load_profile
from flows.config.profile import Profile
from flows.core.manifest import build_manifest, manifest_digest
from flows.core.promotion import PromotedModel
from flows.core.promotion_store import read_history, read_promoted, write_promoted
from flows.core.rollback import (
    RollbackRefused,
    choose_target,
    current_champion,
    model_resource,
    regression_problem,
    rollback_entry,
)
from flows.core.storage import Storage
from flows.flow_runs.run_creator import Creator


@dataclass(frozen=True)
class RollbackPlan:
    """What a rollback changes: the entry appended (and pointed at), and the registry version
    the champion alias moves to (None: the profile registers in no MLflow / Vertex AI)."""

    current: PromotedModel
    entry: PromotedModel
    mlflow_version: str | None
    history_size: int  # entries when planned: a promotion since then stops the rollback
    vertex_version: str | None = None  # projects/…/models/ID@VERSION

    def lines(self) -> list[str]:
        rb = self.entry.rollback
        assert rb is not None
        out = [f"champion: run {self.current.run} ({self.current.model_uri})",
               f"  -> run {self.entry.run} ({self.entry.model_uri}), promoted "
               f"{self.entry.promoted_at}",
               f"by {rb.by} at {rb.at}: {rb.reason}",
               f"who: {rb.verified}",
               "pointer and promoted-history.json: a rollback entry appended, the pointer "
               "names it"]
        if self.mlflow_version is not None:
            out.append(f"MLflow alias champion -> version {self.mlflow_version}")
        if self.vertex_version is not None:
            out.append(f"Vertex AI alias champion -> {self.vertex_version}")
        out.append(f"event {MODEL_ROLLED_BACK.name} on the Prefect API (the profile's "
                   "notify automation sends it on)")
        return out


def plan_rollback(storage: Storage, profile: Profile, to_run: str | None, reason: str,
                  by: str, at: str | None = None, regressed_run: str | None = None,
                  verified: str = "") -> RollbackPlan:
    """Every check, read-only; RollbackRefused names the field and the fix. With
    ``regressed_run`` (the automation's: the event's payload run), only when that run is
    the champion, an empty one refused. ``verified``: how ``by`` is known, recorded and
    announced beside it."""
    registry = profile.promotion_rule.register if profile.promotion_rule else None
    history = read_history(storage, profile)
    current = current_champion(history, read_promoted(storage, profile))
    regression_problem(current, regressed_run)
    target = choose_target(history, current, to_run)
    if not storage.files_under(target.model_uri):
        raise RollbackRefused(f"--to: run {target.run}'s export {target.model_uri} is gone from "
                              "storage; fix: name another promoted run, or restore the export "
                              "there first")
    if target.export_digest:
        found = manifest_digest(build_manifest(storage, target.model_uri))
        if found != target.export_digest:
            raise RollbackRefused(f"--to: run {target.run}'s export {target.model_uri} changed "
                                  f"since it was promoted (digest {found}, promoted as "
                                  f"{target.export_digest}); fix: name another promoted run, "
                                  "or restore the export's files")
    version = None
    if registry is not None and registry.mlflow is not None:
        from flows.integrations.mlflow_registry import promoted_version

        project = profile.gke.project if profile.gke else None
        version = promoted_version(registry.mlflow, target.run, project)
        if version is None:
            raise RollbackRefused(f"promotion.register.mlflow: model {registry.mlflow.model_name}"
                                  f" has no version promoted by run {target.run}; fix: name a "
                                  "run registered there with --to")
    vertex_version = None
    if registry is not None and registry.vertex is not None:
        from flows.integrations.vertex_registry import promoted_version as vertex_promoted

        vertex_version = vertex_promoted(registry.vertex, target.run)
        if vertex_version is None:
            raise RollbackRefused(f"promotion.register.vertex: model "
                                  f"{registry.vertex.display_name!r} has no version promoted by "
                                  f"run {target.run}; fix: name a run uploaded there with --to")
    entry = rollback_entry(target, current, by, reason,
                           at or datetime.now(UTC).isoformat(), verified)
    return RollbackPlan(current, entry, version, len(history), vertex_version)


def apply_rollback(storage: Storage, profile: Profile, plan: RollbackPlan) -> None:
    """The registry's alias, then the history and pointer; the event is the caller's.
    A history that grew since the plan (a promotion meanwhile) refuses first: the plan's
    champion and target may no longer be the right ones."""
    if len(read_history(storage, profile)) != plan.history_size:
        raise RollbackRefused("promoted-history.json: it changed since the rollback was "
                              "planned (a promotion or another rollback meanwhile); fix: run "
                              "the rollback again (--dry-run first) to see the champion now")
    registry = profile.promotion_rule.register if profile.promotion_rule else None
    if plan.mlflow_version is not None and registry is not None and registry.mlflow:
        from flows.integrations.mlflow_registry import move_champion

        move_champion(registry.mlflow, plan.mlflow_version,
                      profile.gke.project if profile.gke else None)
    if plan.vertex_version is not None and registry is not None and registry.vertex:
        from flows.integrations import vertex_registry

        vertex_registry.move_champion(registry.vertex, plan.vertex_version)
    write_promoted(storage, profile, plan.entry)


def carry_out(storage: Storage, profile: Profile, plan: RollbackPlan) -> bool:
    """Apply the plan and post its event; False when no Prefect API was there to take it.
    The one path of both `tpurl rollback` and the rollback flow."""
    apply_rollback(storage, profile, plan)
    return post_event(rolled_back_event(profile.name, plan))


def rolled_back_event(profile: str, plan: RollbackPlan) -> dict[str, Any]:
    """The event's body (POST /api/events), its payload checked against the catalogue."""
    rb = plan.entry.rollback
    assert rb is not None
    payload: dict[str, Any] = {"from_run": rb.from_run, "to_run": plan.entry.run,
                               "model_uri": plan.entry.model_uri, "by": rb.by,
                               "verified": rb.verified, "reason": rb.reason, "at": rb.at}
    if plan.mlflow_version is not None:
        payload["mlflow_version"] = plan.mlflow_version
    return model_event(profile, MODEL_ROLLED_BACK, rb.at, payload)


def model_event(profile: str, kind: EventKind, occurred: str,
                payload: dict[str, Any]) -> dict[str, Any]:
    """A model event's body (POST /api/events), its payload checked against the catalogue."""
    return {"id": str(uuid.uuid4()), "occurred": occurred, "event": kind.name,
            "resource": {**model_resource(profile), "prefect.resource.name": f"{profile} model"},
            "payload": kind.checked(payload)}


def post_event(body: dict[str, Any]) -> bool:
    """Post the event to the Prefect API PREFECT_API_URL names; False when none is set."""
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL

    if not PREFECT_API_URL.value():
        return False
    with get_client(sync_client=True) as client:
        client.request("POST", "/events", json=[body]).raise_for_status()
    return True


def command_creator(by: str | None, account: str, command: str = "tpurl rollback") -> Creator:
    """Who acts with ``command`` and how that is known (pure): the OS account that runs it,
    or the name ``--by`` gives, which nothing checks."""
    if by is None or by == account:
        return Creator(account, f"the OS account that ran `{command}`")
    return Creator(by, f"given with --by, not verified (`{command}` ran as OS account "
                       f"{account})")


def os_account() -> str:
    """The account of this process's user id (not $USER or $LOGNAME, which any caller sets)."""
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return f"uid {os.getuid()}"


def rollback_command(target: str, overrides: dict[str, str], to_run: str | None, reason: str,
                     by: str | None, dry_run: bool) -> int:
    """Exit 0 done (or the dry run printed), 2 refused before any change."""
    creator = command_creator(by, os_account())
    try:
        profile = load_profile(target, overrides)
        storage = storage_for(profile.section.output_root())
        plan = plan_rollback(storage, profile, to_run, reason, creator.by,
                             verified=creator.verified)
    except (ProfileError, RollbackRefused) as exc:
        print(f"error: {exc}; nothing was changed", file=sys.stderr)
        return 2
    if dry_run:
        print("\n".join(["dry run, nothing changed; a rollback would:", *plan.lines()]))
        return 0
    try:
        posted = carry_out(storage, profile, plan)
    except RollbackRefused as exc:  # the history grew since the plan: checked before changes
        print(f"error: {exc}; nothing was changed", file=sys.stderr)
        return 2
    print("\n".join(["rolled back:", *plan.lines()]))
    if not posted:
        print(f"note: PREFECT_API_URL is not set, so no {MODEL_ROLLED_BACK.name} event was "
              "sent (no notification either)", file=sys.stderr)
    return 0
