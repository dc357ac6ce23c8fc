"""The profile's ``gke`` section: the single source of every GKE setting, grouped by concern.

The YAML keys stay flat (``gke.project``, ``gke.num_slices``, ...: what the tutorial's
variables are called, what ``--set`` and the deployments' job variables already use), but the
fields are declared in one model per concern and ``GkeSection`` combines them:

- ``GkeCluster``: where it runs and who may reach it (project ... bucket, CIDR, IAM, Kueue);
- ``GkeCapacity`` (flows/config/gke_capacity.py): the TPU pool and what it costs
  (machine, topology, slices, capacity modes, prices);
- ``GkeJobs`` (flows/config/gke_jobs.py): how the jobs are placed, sized, kept and watched
  (TTL, restarts, budgets);
- ``GkeCredentials``: which Prefect blocks reach the cluster and Google;
- ``GkeSpend`` (flows/config/spend.py): the USD caps on a run's and a stage's TPU time.

Every layer (infra, job rendering, watch, cost) reads these fields and the derived values
below directly; none keeps a copy with its own default.
"""

from __future__ import annotations

import ipaddress
from typing import Annotated, Literal, Self

from pydantic import ValidationError, model_validator

from flows.config import gcp_names as names
from flows.config.capacity import (
    CAPACITY_LIMITS,
    capacity_problems,
    run_budget_problem,
    section_problems,
    split_listed,
)
from flows.config.credentials import GkeCredentials
from flows.config.errors import FixableValueError
from flows.config.gke_capacity import DEFAULT_ESTIMATED_HOURS, GkeCapacity
from flows.config.gke_jobs import GkeJobs
from flows.config.limits import limits, reshapes
from flows.config.retired_keys import RETIRED_KEYS
from flows.config.section_base import StrictModel, check
from flows.config.spend import GkeSpend
from flows.config.timeline import TrainTimeline
from flows.config.types import Checked, ProjectId, Region, dns_label, refusing
from flows.config.watch_budgets import GkeWatchBudgets

__all__ = ["RETIRED_KEYS", "GkeCapacity", "GkeCluster", "GkeCredentials", "GkeSection"]
from flows.config.zones import zone_problems, zones_from_text

CIDR_FIX = ("set gke.authorized_cidr to the network you run kubectl/the flow from, e.g. "
            "--set gke.authorized_cidr=203.0.113.7/32 (`curl ifconfig.me` shows your address); "
            "0.0.0.0/0 works but opens the control plane to the whole internet")


def _cidr(value: str) -> str:
    try:
        ipaddress.ip_network(value.strip(), strict=False)
    except ValueError:
        raise FixableValueError(f"{value!r} is not a CIDR range such as 203.0.113.0/24",
                                CIDR_FIX) from None
    return value.strip()


def _reservation(value: str) -> str | None:
    if not value:
        return None  # whether the mode needs one is GkeSection's check
    check(names.dns_label_problem(value, "reservation name"),
          "use the name shown by `gcloud compute reservations list`")
    return value


ClusterName = Annotated[str, Checked(refusing(
    names.cluster_name_problem, "choose a shorter lowercase name, e.g. 'tpurl-v6e'"),
    names.CLUSTER_NAME_LIMIT)]
BucketName = Annotated[str, Checked(refusing(
    names.bucket_name_problem, "pick a bucket name such as 'my-project-tpurl'"),
    names.BUCKET_NAME_LIMIT)]
ReservationName = Annotated[str, Checked(_reservation,
                                         f"a reservation name: {names.DNS_LABEL_LIMIT}")]
CidrRange = Annotated[str, Checked(_cidr, "a CIDR range such as 203.0.113.0/24 (0.0.0.0/0 "
                                   "opens the control plane to all)")]
ToolkitVersion = Annotated[str, Checked(refusing(
    names.toolkit_version_problem, "use a release tag such as v1.103.0"),
    names.TOOLKIT_VERSION_LIMIT)]
BlueprintName = Annotated[str, dns_label(
    "Kubernetes name", "use the blueprint's names: namespace default, CPU pool cpu-np")]



class GkeCluster(StrictModel):
    """Where the pipeline runs (the tutorial's Cluster Toolkit deployment) and who may reach it."""

    project: ProjectId
    """The Google Cloud project everything is created in."""
    region: Region
    """The region of the cluster, the bucket and the repository."""
    zone: str
    """The zone of the TPU pool (one of the region's zones that offers TPU v6e); with
    gke.zones, the first of them (may be left out)."""
    zones: list[str] | None = None
    """The zones, in order of preference, whose TPU pools may serve a run (each a zone of the
    region that offers v6e); unset: gke.zone alone."""
    cluster: ClusterName
    """The GKE cluster's name; the infra stage deploys it when it does not exist."""
    bucket: BucketName
    """The bucket for checkpoints, exports, records and results."""
    reservation: ReservationName | None = None  # required by gke.capacity: reservation only
    """The TPU reservation to consume; required with capacity: reservation only."""
    authorized_cidr: CidrRange  # the control plane's allowed sources; required, never implied
    """The sources allowed to reach the control plane (CIDR); required, never implied."""
    # bucket-scoped by default: project-storage-admin gives the node pool's and
    # the workloads' accounts storage.admin on every bucket of the project, reachable from
    # the host-network Pathways workers (flows/backends/gke/team_identity.py).
    iam_mode: Literal["project-storage-admin", "bucket-scoped"] = "bucket-scoped"
    """bucket-scoped grants the profile's bucket only, to its team's principal (its pods)
    and the node pool's account (the Pathways workers); project-storage-admin every bucket
    of the project."""
    cluster_toolkit_version: ToolkitVersion = "v1.103.0"
    """The Cluster Toolkit release whose gcluster deploys the blueprint."""
    cluster_toolkit_sha256: str | None = None
    """The SHA-256 of that release's bundle, checked before it is unpacked (else the shipped
    table's line)."""
    kueue_queue: Annotated[str, dns_label("Kueue LocalQueue name",
                                         "the blueprint's queue is 'user-queue'")] = "user-queue"
    """The Kueue LocalQueue the JobSets are submitted to."""
    namespace: BlueprintName = "default"
    """The Kubernetes namespace of the jobs, Secrets and ConfigMaps."""
    cpu_pool: BlueprintName = "cpu-np"  # the blueprint's CPU node pool (n4-standard-64, 0–100 nodes)
    """The blueprint's CPU node pool (conversion, the Pathways head)."""

    @model_validator(mode="before")
    @classmethod
    @reshapes("text with commas is a list of zones; gke.zone left out is its first")
    def _zone_from_zones(cls, data: object) -> object:
        """gke.zones as text is a comma list; gke.zone, left out, is its first (zones.py)."""
        return zones_from_text(data) if isinstance(data, dict) else data

    @model_validator(mode="after")
    @limits({"zone": f"{names.ZONE_LIMIT}, in gke.region", "zones": [
        f"each {names.ZONE_LIMIT}, in gke.region; no repeats; gke.zone first"]})
    def _zone_in_region(self) -> Self:
        """gke.zone and gke.zones: zones of the region, no repeats, gke.zone first (zones.py)."""
        if problems := zone_problems(self.zone, self.zones, self.region):
            first, *rest = problems
            raise FixableValueError(first.problem, first.fix, first.field, tuple(rest))
        return self

    @property
    def zone_order(self) -> tuple[str, ...]:
        """The zones a run may be served in, in order of preference: gke.zones, else
        gke.zone alone."""
        return tuple(self.zones) if self.zones else (self.zone,)

    @property
    def open_to_world(self) -> bool:
        """0.0.0.0/0, ::/0 or any other prefix of length 0: the whole internet."""
        return ipaddress.ip_network(self.authorized_cidr, strict=False).prefixlen == 0

    @property
    def kube_context(self) -> str:
        """The kubeconfig context gcloud writes for this regional cluster."""
        return f"gke_{self.project}_{self.region}_{self.cluster}"

    @property
    def workload_service_account(self) -> str:
        """The blueprint's workload identity account (``CLUSTER-gke-wl-sa``)."""
        return f"{self.cluster}-gke-wl-sa@{self.project}.iam.gserviceaccount.com"

    @property
    def node_service_account(self) -> str:
        """The blueprint's node pool account (``CLUSTER-gke-np-sa``)."""
        return f"{self.cluster}-gke-np-sa@{self.project}.iam.gserviceaccount.com"


class GkeSection(GkeCluster, GkeCapacity, GkeJobs, GkeCredentials, GkeSpend,
                 GkeWatchBudgets):
    """The cluster the tutorial builds with Cluster Toolkit, its jobs, and what it costs."""

    @model_validator(mode="before")
    @classmethod
    @limits({"estimated_hours": "no train entry when gke.train_timeline is given (its billed "
                                "phases are the training's hours)"})
    def _train_hours_from_timeline(cls, data: object) -> object:
        """A stated training timeline gives gke.estimated_hours.train (its billed phases),
        so every reader of the estimate (plan, caps, flex-start's lifetime) sees one
        figure; giving both would leave one of them silently unused."""
        if not isinstance(data, dict) or not data.get("train_timeline"):
            return data
        try:
            timeline = TrainTimeline.model_validate(data["train_timeline"])
        except ValidationError:
            return data  # the field's own validation names what is wrong in it
        hours = dict(data.get("estimated_hours") or
                     {k: v for k, v in DEFAULT_ESTIMATED_HOURS.items() if k != "train"})
        if "train" in hours:
            raise FixableValueError(
                "gke.estimated_hours.train and gke.train_timeline both give training's hours",
                "remove gke.estimated_hours.train: the timeline's billed phases are the "
                "estimate", field="estimated_hours")
        return {**data, "estimated_hours": {**hours, "train": timeline.train_hours(
            slice_first=_queued_in(data.get("capacity")))}}

    # What GKE's outputs and keys are made of (flows/core/layout.py chains them).
    def output_root(self) -> str:
        return f"gs://{self.bucket}"

    def runtime_identity(self, base_image: str) -> str:
        return base_image  # the MaxText code that runs is the base image's

    def image_key_parts(self) -> list[object]:
        return []  # the image key is the base and the patches alone

    def infra_key_parts(self, maxtext_name: str = "") -> tuple[object, ...]:
        del maxtext_name  # the cluster, bucket and node pools are the same whatever trains
        # The dict hashed before gke.nodepool_count was folded into gke.num_slices: the same
        # key for every profile whose two counts agreed, so existing deployments keep records.
        # The Pathways digests and gke.zones (added later) only when set: a profile without
        # them keeps the key it had, and its deployment its records.
        dump = {k: v for k, v in self.model_dump().items()
                if v is not None or k not in ("pathways_server_digest", "pathways_proxy_digest",
                                              "zones")}
        return ("infra-gke", {**dump, "nodepool_count": self.num_slices})

    def model_seed(self) -> int | None:
        return None  # the model comes from the hub

    def dataset_key_parts(self) -> tuple[object, ...] | None:
        return None  # the hub's dataset, named in the args

    @model_validator(mode="after")
    @limits(CAPACITY_LIMITS)
    def _capacity_needs(self) -> Self:
        """Checked across the sub-models: each mode of the chain (capacity) decides which
        cluster and job fields (reservation, max_run_hours, preemption_budget, prices) must
        or must not be set; a rule of one mode applies when the mode is anywhere in it."""
        chain = self.capacity_chain
        problems = capacity_problems(chain, self.reservation, self.max_run_hours,
                                     float(self.estimated_hours.get("train", 0.0)))
        if self.bounded_run:  # the training's budget (flows/core/budgets.py)
            field = "train_run_budget_s" if self.train_run_budget_s else "run_budget_s"
            if found := run_budget_problem(self.max_run_hours, field, getattr(self, field),
                                           "training"):
                problems.append(found)
        rest = section_problems(chain, set(self.prices), self.preemption_budget,
                                self.conversion_placement, self.machine.generation)
        prices = [p for p in rest if p[0] == "prices"]
        problems = prices + problems + [p for p in rest if p[0] != "prices"]
        if problems:
            first, *others = (FixableValueError(problem, fix, field=field)
                              for field, problem, fix in problems)
            raise FixableValueError(first.problem, first.fix, first.field, tuple(others))
        return self


def _queued_in(capacity: object) -> bool:
    """Queued provisioning is a mode of the chain as given (one mode, a list, or text with
    commas): its slice is billed through the head's start (flows/config/timeline.py), and a
    run may be served by any mode of the chain, so the estimate must admit it."""
    listed = split_listed(capacity)
    return "queued" in (listed if isinstance(listed, (list, tuple)) else [listed])
