"""Training's start-up and run as a stated timeline (``gke.train_timeline``), from which the
training estimate, and so the spend cap's floor, are built (pure).

Why a timeline rather than one number: on a pool that scales from zero most of a short run's
wall time is start-up, and only part of it is billed. With the Pathways JobSet's
``startupPolicyOrder: InOrder`` (jobset v0.10.1 pkg/controllers/jobset_controller.go
resumeJobsIfNecessary, allReplicasStarted) the TPU workers do not exist until the head, on
the CPU pool, is ready, which includes pulling the post-training image; only then does the
TPU pool scale up, and GCP bills the TPU VMs from their creation. So the head's image pull
and the scale-up take wall time but no TPU money; every phase after the nodes exist does,
and so does the autoscaler's scale-down tail after the pods end (flows/config/spend.py
SCALE_DOWN_TAIL_S, counted there, not here). Queued provisioning is the exception: the
slice's nodes exist once the ProvisioningRequest is Provisioned, before Kueue admits the
JobSet, and its workers start with the head (flows/backends/gke/jobs/pathways.py
startup_order), so the head's image pull is billed there; the wait for the request is not.
A profile that states its phases lets the plan print where the estimate comes from, and a
first real run can correct one phase, not a total nobody can take apart.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

# (field, what happens, billed: the TPU nodes exist meanwhile; with queued capacity the
# head's image pull is billed too: HEAD_START)
PHASES: tuple[tuple[str, str, bool], ...] = (
    ("image_pull", "the Pathways head pulls the post-training image on the CPU pool", False),
    ("scale_up", "the autoscaler brings the TPU slice up from zero", False),
    ("pathways_registration", "the workers pull their image and register with the head", True),
    ("checkpoint_load", "the converted checkpoint is restored", True),
    ("vllm_start", "the rollout engine (vLLM, tpu-inference) starts", True),
    ("first_compiles", "the first train and sampling steps compile", True),
    ("steps", "the training steps", True),
    ("last_checkpoint", "the last checkpoint is written", True),
)


HEAD_START = "image_pull"  # billed when the slice exists before the head starts (queued)
# kubelet restarts a failed container after 10 s, doubling up to 5 min (kubernetes
# pkg/kubelet/kubelet.go backOffPeriod, MaxContainerBackOff = 300 s; the alpha gates that
# shorten it, KubeletCrashLoopBackOffMax and ReduceDefaultCrashLoopBackOffDecay, are off by
# default). A queued run's workers restart in place while the head pulls its image
# (flows/backends/gke/jobs/pathways.py startup_order), so by the time the head answers a
# worker may be waiting out the whole last back-off: up to this long, with the slice billed.
KUBELET_MAX_BACKOFF_MIN = 5.0


def is_billed(phase: str, slice_first: bool) -> bool:
    """Whether GCP bills the slice through ``phase``; ``slice_first``: the nodes exist before
    the head starts (queued provisioning)."""
    paid = next(p for name, _, p in PHASES if name == phase)
    return paid or (slice_first and phase == HEAD_START)


class TrainTimeline(BaseModel):
    """Minutes per phase of one training run; every phase must be stated."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    image_pull: float = Field(ge=0)
    """Minutes to pull the post-training image (not billed: no TPU node yet)."""
    scale_up: float = Field(ge=0)
    """Minutes for the TPU pool to scale up from zero (not billed)."""
    pathways_registration: float = Field(ge=0)
    """Minutes for the workers to register with the Pathways head."""
    checkpoint_load: float = Field(ge=0)
    """Minutes to load the converted checkpoint."""
    vllm_start: float = Field(ge=0)
    """Minutes for the vLLM engine to start."""
    first_compiles: float = Field(ge=0)
    """Minutes of the first XLA compilations."""
    steps: float = Field(gt=0)
    """Minutes of the training steps."""
    last_checkpoint: float = Field(ge=0)
    """Minutes to write the last checkpoint."""

    def minutes(self, billed: bool | None = None, slice_first: bool = False) -> float:
        """All phases, or only the billed (``True``) or unbilled (``False``) ones."""
        return sum(getattr(self, name) for name, _, _ in PHASES
                   if billed is None or is_billed(name, slice_first) == billed)

    def train_hours(self, slice_first: bool = False) -> float:
        """What ``gke.estimated_hours.train`` means: the hours training holds the slice."""
        return round(self.minutes(billed=True, slice_first=slice_first) / 60.0, 4)


def timeline_lines(timeline: TrainTimeline, tail_min: float,
                   slice_first: bool = False) -> list[str]:
    """The plan's account of the training estimate, phase by phase; ``slice_first``: queued
    capacity, whose slice is billed through the head's start."""
    lines = ["  training timeline (gke.train_timeline, minutes; * = the TPU nodes exist, "
             "billed):"]
    for name, what, _ in PHASES:
        paid = is_billed(name, slice_first)
        note = " (queued: the booked slice waits, billed)" if paid and name == HEAD_START \
            and slice_first else ""
        lines.append(f"    {'*' if paid else ' '} {name:<22} {getattr(timeline, name):5.1f}"
                     f"  {what}{note}")
    if slice_first:
        lines.extend(_backoff_lines(timeline))
    if tail_min:
        lines.append(f"    * {'scale-down tail':<22} {tail_min:5.1f}  at most, until the "
                     "autoscaler removes the unneeded nodes")
    hours = timeline.train_hours(slice_first)
    lines.append(f"    wall {timeline.minutes() + tail_min:.1f} min, billed "
                 f"{timeline.minutes(True, slice_first) + tail_min:.1f} min "
                 f"(gke.estimated_hours.train = {hours:g} h, plus the tail)")
    return lines


def _backoff_lines(timeline: TrainTimeline) -> list[str]:
    """What a queued run's worker restarts cost: after the head answers, a worker may still
    wait out kubelet's back-off, billed, before it registers; pathways_registration should
    hold that wait, and the plan says when it cannot."""
    most = KUBELET_MAX_BACKOFF_MIN
    lines = [f"      queued: the workers start with the head and restart until it answers; "
             f"kubelet waits 10 s doubling to {most:g} min between restarts, so a worker may "
             f"register up to {most:g} min after the head answers, billed"]
    if timeline.pathways_registration < most:
        lines.append(f"      pathways_registration is {timeline.pathways_registration:g} min, "
                     f"less than that wait: the billed estimate may be short by up to "
                     f"{most - timeline.pathways_registration:g} min (state "
                     f"gke.train_timeline.pathways_registration: {most:g} or more)")
    return lines
