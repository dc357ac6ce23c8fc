"""The stage model: four questions every stage answers (docs/architecture.md).

- ``plan``   what it would do; pure.
- ``done``   is a verified output already there whose lineage matches the current inputs?
- ``run``    make it so, through the backend (then ``verify``).
- ``verify`` check the output for real and describe it; the runner writes the lineage record.

``execute`` strings them together the same way for every stage, so skip/verify/lineage rules
cannot drift between stages.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field

from flows.config.profile import Profile
from flows.core.backend import ExclusiveProvider, RecordKeeper, StageLogger, WorkloadRun
from flows.core.failures import StageFailed
from flows.core.layout import Layout
from flows.core.lineage import (
    LineageRecord,
    UnreadableRecord,
    linked_out,
    outside_root,
    read_record,
    relative_outputs,
    verified_identity,
    write_record,
)
from flows.core.manifest import build_manifest, manifest_problems
from flows.core.secrets import Redactor
from flows.core.storage import Storage
from flows.core.workload import Workload

if TYPE_CHECKING:
    from flows.core.backend import Backend, StageProvider, StageWork


class StageOutput(BaseModel):
    """What a stage hands to the next one and to the flow result (JSON-persistable)."""

    stage: str
    status: Literal["ran", "skipped"]
    key: str
    fingerprint: str
    uris: dict[str, str]
    details: dict[str, Any] = Field(default_factory=dict)
    duration_s: float = 0.0
    chip_hours: float = 0.0
    workloads: list[WorkloadRun] = Field(default_factory=list)


class PlannedWorkload(BaseModel):
    name: str
    image: str
    placement: str
    command: str
    env: dict[str, str]
    secret_env: dict[str, str]


class StagePlan(BaseModel):
    stage: str
    title: str
    key: str
    inputs: dict[str, str]
    outputs: dict[str, str]
    actions: list[str] = Field(default_factory=list)
    workloads: list[PlannedWorkload] = Field(default_factory=list)
    estimated_chip_hours: float = 0.0
    notes: list[str] = Field(default_factory=list)


@dataclass
class StageContext:
    profile: Profile
    layout: Layout
    backend: Backend
    storage: Storage
    logger: StageLogger
    redactor: Redactor = field(default_factory=Redactor)
    scratch: dict[str, Any] = field(default_factory=dict)  # run() → verify() within one stage


def plan_workload(workload: Workload) -> PlannedWorkload:
    placement = workload.placement
    where: str = placement.kind
    if placement.topology:
        where += f" {placement.machine_type} {placement.topology} x{placement.num_slices}"
    return PlannedWorkload(
        name=workload.name, image=workload.image, placement=where,
        command=" && ".join([*workload.preamble, workload.command_line()]),
        env=dict(workload.env),
        secret_env={name: ref.describe() for name, ref in workload.secret_env})


class Stage(ABC):
    name: str
    title: str
    key: Callable[[Profile], str]  # the profile's key of this stage (one of ``Layout``'s)

    @abstractmethod
    def plan(self, profile: Profile, backend: Backend) -> StagePlan:
        """Pure: ``backend`` is freshly built by ``backend_for`` and has touched nothing."""

    @abstractmethod
    def record_uri(self, ctx: StageContext) -> str: ...

    def input_fingerprints(self, upstream: dict[str, StageOutput]) -> dict[str, str]:
        return {name: out.fingerprint for name, out in sorted(upstream.items())}

    def outputs_present(self, ctx: StageContext, record: LineageRecord) -> bool:
        return all(ctx.storage.exists(uri) for uri in record.outputs.values())

    @abstractmethod
    def content_outputs(self, ctx: StageContext) -> tuple[str, ...]:
        """Names of the outputs whose files the lineage manifest covers. Each stage names its
        own: a stage naming none gets no manifest, so a rerun would reuse its outputs on
        their existence alone, unchecked against what the stage wrote."""

    def check_inputs(self, ctx: StageContext) -> None:
        """Refuse, before anything runs or is skipped, inputs the programs would choke on."""
        return None

    def leftover_dirs(self, ctx: StageContext) -> list[str]:
        """Directories an earlier, unverified attempt may have left half-written: cleared
        before the stage runs, so a partial leftover can never pass as new output. A stage
        that resumes from its leftovers (training checkpoints) lists none."""
        return []

    def done(self, ctx: StageContext, upstream: dict[str, StageOutput],
             readonly: bool = False) -> StageOutput | None:
        """The verified output, or None with the reason logged: no record, a record for
        other inputs, an output that changed since it was verified, or an unreadable record
        over an output that no longer verifies. ``readonly``: also None where the answer
        would need a write (a damaged record rewritten, a manifest backfilled), which only
        the flow makes, under the profile's lock (flows/console/finished.py asks so)."""
        uri = self.record_uri(ctx)
        try:
            stored = self.read_record(ctx, uri)
        except UnreadableRecord as exc:
            return None if readonly else self._reverify(ctx, upstream, uri, exc)
        if stored is None:
            return None
        if why := stored.mismatch(self.key(ctx.profile), self.input_fingerprints(upstream)):
            ctx.logger.info("%s: the recorded output was made from other inputs (%s); running",
                            self.name, why)
            return None
        record = stored.model_copy(update={"outputs": stored.resolved_outputs(ctx.layout.root)})
        if why := (outside_root(stored.outputs, ctx.layout.root)
                   or linked_out(ctx.storage, record.outputs, ctx.layout.root)):
            ctx.logger.warning("%s: the record is not trusted (%s); running the stage again",
                               self.name, why)
            return None
        if not self.outputs_present(ctx, record):
            ctx.logger.warning("%s: the recorded output is gone (%s); running the stage again",
                               self.name, ", ".join(record.outputs.values()))
            return None
        problems, unlisted = self._manifest_check(ctx, record)
        if problems:
            ctx.logger.warning("%s: the output changed since it was verified (%s); running the "
                               "stage again", self.name, "; ".join(problems[:5]))
            return None
        if unlisted and (readonly or not self._backfill(ctx, stored, record, unlisted, uri)):
            return None
        return StageOutput(stage=self.name, status="skipped", key=stored.key,
                           fingerprint=stored.fingerprint, uris=record.outputs,
                           details=stored.details)

    def _reverify(self, ctx: StageContext, upstream: dict[str, StageOutput], uri: str,
                  damage: UnreadableRecord) -> StageOutput | None:
        """A damaged record (torn, garbage-written) says nothing, but only a verified run
        writes one: the output is verified again. If it passes, the record is rewritten from
        that verification: the same files give the same identity, so the stages after it
        stay skipped; if not, this stage runs again and the stages after it with it."""
        try:
            uris, details = self.verify(ctx)
        except StageFailed as exc:
            ctx.logger.warning("%s: %s, and the output does not verify (%s); running the stage "
                               "again, and the stages after it with it", self.name, damage,
                               exc.diagnosis.summary)
            return None
        record = self.store_record(ctx, uri, self._record(ctx, upstream, uris, details))
        ctx.logger.warning("%s: %s; the output verifies, so its record was rewritten from that "
                           "verification and the stage is skipped (a stage after it runs again "
                           "only if these files are not the ones it was made from)", self.name,
                           damage)
        return StageOutput(stage=self.name, status="skipped", key=record.key,
                           fingerprint=record.fingerprint, uris=uris, details=details)

    def _record(self, ctx: StageContext, upstream: dict[str, StageOutput], uris: dict[str, str],
                details: dict[str, Any]) -> LineageRecord:
        """The record of a verified output: its manifest and the identity it gives."""
        manifest = {name: build_manifest(ctx.storage, uris[name])
                    for name in self.content_outputs(ctx) if name in uris}
        return LineageRecord(stage=self.name, key=self.key(ctx.profile),
                             inputs=self.input_fingerprints(upstream),
                             outputs=relative_outputs(uris, ctx.layout.root), details=details,
                             manifest=manifest, run_id=verified_identity(manifest, details))

    def _what_is_left(self, ctx: StageContext, upstream: dict[str, StageOutput]) -> str:
        """What the files about to be cleared are: a verified output that was damaged since
        (its record still matches this config) or what an unverified attempt left."""
        try:
            stored = self.read_record(ctx, self.record_uri(ctx))
        except (UnreadableRecord, OSError):
            stored = None
        if stored is not None and stored.matches(self.key(ctx.profile),
                                                 self.input_fingerprints(upstream)):
            return "the verified output, damaged since it was verified"
        return "what an earlier unverified attempt left"

    def read_record(self, ctx: StageContext, uri: str) -> LineageRecord | None:
        """The stored record: a file beside the output, unless the stage keeps it elsewhere."""
        return read_record(ctx.storage, uri)

    def store_record(self, ctx: StageContext, uri: str, record: LineageRecord) -> LineageRecord:
        """Keep the record; returns it as a later ``read_record`` will see it (its fingerprint
        is what downstream stages record, so the two must agree)."""
        write_record(ctx.storage, uri, record)
        return record

    def _prune_after_failure(self, ctx: StageContext) -> None:
        """Directories a failed attempt created but left empty go: nothing there could pass
        as output anyway (only a verified run writes a record), but a user reading the tree
        should not have to wonder. Logs of the attempt stay: they explain the failure."""
        directory = self.record_uri(ctx).rsplit("/", 1)[0]
        try:
            ctx.storage.prune_empty(directory)
        except Exception as exc:  # never mask the failure itself
            ctx.logger.warning("%s: could not tidy %s (%s)", self.name, directory, exc)

    def _manifest_check(self, ctx: StageContext,
                        record: LineageRecord) -> tuple[list[str], list[str]]:
        """(problems, outputs the record has no manifest for: older records)."""
        problems: list[str] = []
        unlisted = []
        for name in self.content_outputs(ctx):
            if name not in record.outputs:
                continue
            if name not in record.manifest:
                unlisted.append(name)
                continue
            problems += manifest_problems(ctx.storage, record.outputs[name],
                                          record.manifest[name])
        return problems, unlisted

    def _backfill(self, ctx: StageContext, stored: LineageRecord, record: LineageRecord,
                  unlisted: list[str], uri: str) -> bool:
        """A record written before manifests existed: trust the output only after the
        stage's own verification passes, then record its manifest (same fingerprint)."""
        try:
            self.verify(ctx)
        except StageFailed as exc:
            ctx.logger.warning("%s: the recorded output fails verification (%s); running the "
                               "stage again", self.name, exc.diagnosis.summary)
            return False
        manifest = {**stored.manifest, **{name: build_manifest(ctx.storage, record.outputs[name])
                                          for name in unlisted}}
        write_record(ctx.storage, uri, stored.model_copy(update={"manifest": manifest}))
        ctx.logger.info("%s: verified an output recorded before manifests; manifest added",
                        self.name)
        return True

    @abstractmethod
    def run(self, ctx: StageContext, upstream: dict[str, StageOutput]) -> list[WorkloadRun]:
        """Make the output exist (idempotently)."""

    @abstractmethod
    def verify(self, ctx: StageContext) -> tuple[dict[str, str], dict[str, Any]]:
        """Check the output for real; return (output URIs, details) or raise StageFailed."""

    def chip_hours(self, ctx: StageContext, wall_s: float) -> float:
        """Held, not busy: what the backend bills for this stage's wall time."""
        return ctx.backend.held_chip_hours(self.name, wall_s)

    def execute(self, ctx: StageContext, upstream: dict[str, StageOutput]) -> StageOutput:
        started = time.monotonic()
        self.check_inputs(ctx)
        skipped = self.done(ctx, upstream)
        if skipped is not None:
            skipped.duration_s = time.monotonic() - started
            ctx.logger.info("%s: verified output already there, skipping (%s)", self.name,
                            ", ".join(skipped.uris.values()))
            return skipped
        what = self._what_is_left(ctx, upstream)
        for directory in self.leftover_dirs(ctx):
            if cleared := ctx.backend.clear_leftovers(self.name, directory):
                ctx.logger.warning("%s: removed %d file(s) of %s in %s (its logs are kept)",
                                   self.name, cleared, what, directory)
        try:
            runs = self.run(ctx, upstream)
            uris, details = self.verify(ctx)
        except BaseException:
            self._prune_after_failure(ctx)
            raise
        record = self.store_record(ctx, self.record_uri(ctx),
                                   self._record(ctx, upstream, uris, details))
        wall = time.monotonic() - started
        return StageOutput(stage=self.name, status="ran", key=record.key,
                           fingerprint=record.fingerprint, uris=uris, details=details,
                           duration_s=wall, chip_hours=self.chip_hours(ctx, wall),
                           workloads=runs)


class ProvidedStage(Stage):
    """A stage the backend implements whole (image, infra): this class only adapts a
    :class:`~flows.core.backend.StageProvider` to the stage model, so skip/verify/lineage
    rules stay the ones every stage follows."""

    @abstractmethod
    def provider(self, backend: Backend) -> StageProvider: ...

    def execute(self, ctx: StageContext, upstream: dict[str, StageOutput]) -> StageOutput:
        provider = self.provider(ctx.backend)
        if isinstance(provider, ExclusiveProvider):
            with provider.exclusive(ctx):
                return super().execute(ctx, upstream)
        return super().execute(ctx, upstream)

    def plan(self, profile: Profile, backend: Backend) -> StagePlan:
        return stage_plan(self, profile, self.provider(backend).plan())

    def record_uri(self, ctx: StageContext) -> str:
        return self.provider(ctx.backend).record_uri()

    def outputs_present(self, ctx: StageContext, record: LineageRecord) -> bool:
        return self.provider(ctx.backend).present(ctx, record)

    def content_outputs(self, ctx: StageContext) -> tuple[str, ...]:
        return self.provider(ctx.backend).content_outputs

    def leftover_dirs(self, ctx: StageContext) -> list[str]:
        return self.provider(ctx.backend).leftover_dirs()

    def read_record(self, ctx: StageContext, uri: str) -> LineageRecord | None:
        provider = self.provider(ctx.backend)
        if isinstance(provider, RecordKeeper):
            return provider.read_record(ctx)
        return super().read_record(ctx, uri)

    def store_record(self, ctx: StageContext, uri: str, record: LineageRecord) -> LineageRecord:
        provider = self.provider(ctx.backend)
        if isinstance(provider, RecordKeeper):
            return provider.store_record(ctx, record)
        return super().store_record(ctx, uri, record)

    def _prune_after_failure(self, ctx: StageContext) -> None:
        if not isinstance(self.provider(ctx.backend), RecordKeeper):  # nothing of ours on disk
            super()._prune_after_failure(ctx)

    def run(self, ctx: StageContext, upstream: dict[str, StageOutput]) -> list[WorkloadRun]:
        return self.provider(ctx.backend).run(ctx)

    def verify(self, ctx: StageContext) -> tuple[dict[str, str], dict[str, Any]]:
        return self.provider(ctx.backend).verify(ctx)


class ProgramStage(Stage):
    """A stage that runs MaxText programs (convert, train, export): it states its inputs,
    outputs and workloads as a :class:`StageWork`, and the plan around them (key, title,
    chip-hours, how a workload is shown) is assembled here, the same way for all three."""

    @abstractmethod
    def plan_work(self, profile: Profile, backend: Backend) -> StageWork:
        """Pure, like :meth:`Stage.plan`."""

    def plan(self, profile: Profile, backend: Backend) -> StagePlan:
        return stage_plan(self, profile, self.plan_work(profile, backend),
                         backend.estimated_chip_hours(self.name))


def stage_plan(stage: Stage, profile: Profile, work: StageWork,
              estimated_chip_hours: float = 0.0) -> StagePlan:
    return StagePlan(stage=stage.name, title=stage.title, key=stage.key(profile),
                     inputs=work.inputs, outputs=work.outputs, actions=work.actions,
                     workloads=[plan_workload(w) for w in work.workloads],
                     estimated_chip_hours=estimated_chip_hours, notes=work.notes)


def built_image(upstream: dict[str, StageOutput]) -> str | None:
    """The image reference (by digest) the image stage produced, if it ran upstream."""
    image = upstream.get("image")
    return image.uris.get("image") if image is not None else None
