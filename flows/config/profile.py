"""The profile: everything one pipeline needs, as frozen pydantic models.

Field names follow the tutorial's variables (project, region, zone, cluster, bucket, topology,
...) so a reader of the tutorial finds them. Step arguments (`convert.args`, `train.args`,
`export.args`) are kept as ordered MaxText ``key=value`` pairs rather than re-typed fields:
they are passed through verbatim, and the checks that matter (parallelism, GRPO group size,
learning rate) read them by their MaxText names.
"""

from __future__ import annotations

import ipaddress
import math
from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from flows.config import gcp_names as names
from flows.config.errors import FixableValueError
from flows.config.tpu import (
    TPU_MACHINES,
    chips_in_topology,
    supported_topologies,
    topology_is_well_formed,
)

Scalar = str | int | float | bool

# Arguments the pipeline computes from stage outputs (or from the secret): a profile that
# sets them would silently fight the pipeline, so they are rejected.
_ALWAYS = frozenset({"model_name", "hf_access_token", "base_output_directory", "run_name",
                     "load_parameters_path", "--hf_model_path"})
RESERVED_ARGS: dict[str, frozenset[str]] = {
    "model": _ALWAYS | {"hf_train_files", "tokenizer_path"},
    "convert": _ALWAYS,
    "train": _ALWAYS | {"hf_train_files", "tokenizer_path"},
    "export": _ALWAYS,
}


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _scalar_args(value: object) -> object:
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, dict | list) or item is None:
                raise FixableValueError(
                    f"argument {key!r} has a {type(item).__name__} value; MaxText arguments "
                    "are single values", f"write it as one string, e.g. {key}: '...'")
    return value


class SecretRef(StrictModel):
    """Where a secret comes from. Never the secret itself."""

    env: str | None = None
    secret_block: str | None = None
    gcp_secret: str | None = None  # a Secret Manager secret of the profile's project (latest)

    @model_validator(mode="after")
    def _exactly_one(self) -> Self:
        if sum(v is not None for v in (self.env, self.secret_block, self.gcp_secret)) != 1:
            raise FixableValueError(
                "give exactly one source for the token",
                "write {env: HF_TOKEN} (an environment variable name), {secret_block: NAME} "
                "(a Prefect Secret block) or {gcp_secret: NAME} (GCP Secret Manager)",
            )
        if self.gcp_secret is not None and (problem := names.secret_id_problem(self.gcp_secret)):
            raise FixableValueError(problem, "name the secret as in `gcloud secrets list`")
        if self.env is not None and (problem := names.env_var_problem(self.env)):
            raise FixableValueError(problem, "name the variable, e.g. {env: HF_TOKEN}")
        if self.secret_block is not None and (problem := names.block_name_problem(self.secret_block)):
            raise FixableValueError(problem, "name a Prefect Secret block, e.g. {secret_block: hf-token}")
        return self

    def describe(self) -> str:
        if self.env:
            return f"env:{self.env}"
        if self.gcp_secret:
            return f"gcp-secret-manager:{self.gcp_secret}"
        return f"prefect-secret:{self.secret_block}"


class GkeSection(StrictModel):
    """The cluster the tutorial builds with Cluster Toolkit, and what it costs."""

    project: str
    region: str
    zone: str
    cluster: str
    bucket: str
    reservation: str
    machine_type: str = "ct6e-standard-4t"
    topology: str = "4x8"
    num_slices: int = Field(1, ge=1)
    nodepool_count: int = Field(1, ge=1)
    cluster_toolkit_version: str = "v1.103.0"
    kueue_queue: str = "user-queue"
    authorized_cidr: str  # the control plane's allowed sources; required, never implied
    iam_mode: Literal["project-storage-admin", "bucket-scoped"] = "project-storage-admin"
    cluster_toolkit_sha256: str | None = None
    # USD per chip-hour by tier; v6e US list prices at GA.
    price_table: dict[str, float] = Field(
        default_factory=lambda: {"on-demand": 2.70, "cud-1y": 1.89, "cud-3y": 1.22})
    price_tier: str = "on-demand"
    estimated_hours: dict[Literal["convert", "train", "export"], float] = Field(
        default_factory=lambda: {"convert": 0.5, "train": 4.0, "export": 0.5})
    # How the GKE backend places the jobs (flows/backends/gke/jobs/options.py reads these by name).
    conversion_placement: Literal["cpu-pool", "tpu-hosts"] = "cpu-pool"
    cpu_pool: str = "cpu-np"
    namespace: str = "default"
    pathways_tag: str = "jax-0.11.0"
    conversion_cpu: str = "30"
    conversion_memory: str = "200Gi"
    conversion_ephemeral_storage: str = "200Gi"
    job_ttl_s: int = Field(3600, ge=0)
    train_ttl_s: int = Field(86400, ge=0)
    job_max_restarts: int = Field(1, ge=0)
    train_max_restarts: int = Field(0, ge=0)
    # Cluster access (flows/backends/gke/watch/client.py) and watch budgets (flows/backends/gke/backend.py).
    kubernetes_credentials_block: str | None = None
    gcp_credentials_block: str | None = None
    queue_budget_s: float | None = Field(None, gt=0)
    run_budget_s: float | None = Field(None, gt=0)
    train_run_budget_s: float | None = Field(None, gt=0)
    preemption_budget: int | None = Field(None, ge=0)

    @field_validator("pathways_tag")
    @classmethod
    def _pinned_pathways(cls, v: str) -> str:
        if v in ("", "latest"):
            raise FixableValueError("the Pathways images must be pinned, not :latest",
                                    "set a tag that matches the image's JAX, e.g. jax-0.11.0")
        return v

    @field_validator("namespace", "cpu_pool")
    @classmethod
    def _dns(cls, v: str) -> str:
        if problem := names.dns_label_problem(v, "Kubernetes name"):
            raise FixableValueError(problem, "use the blueprint's names: namespace default, "
                                    "CPU pool cpu-np")
        return v

    @field_validator("project")
    @classmethod
    def _project(cls, v: str) -> str:
        if problem := names.project_id_problem(v):
            raise FixableValueError(problem, "use the project ID shown by `gcloud projects list`")
        return v

    @field_validator("region")
    @classmethod
    def _region(cls, v: str) -> str:
        if problem := names.region_problem(v):
            raise FixableValueError(problem, "v6e regions include us-east5, us-east1, us-central1")
        return v

    @field_validator("cluster")
    @classmethod
    def _cluster(cls, v: str) -> str:
        if problem := names.cluster_name_problem(v):
            raise FixableValueError(problem, "choose a shorter lowercase name, e.g. 'tpurl-v6e'")
        return v

    @field_validator("bucket")
    @classmethod
    def _bucket(cls, v: str) -> str:
        if problem := names.bucket_name_problem(v):
            raise FixableValueError(problem, "pick a bucket name such as 'my-project-tpurl'")
        return v

    @field_validator("reservation")
    @classmethod
    def _reservation(cls, v: str) -> str:
        if problem := names.dns_label_problem(v, "reservation name"):
            raise FixableValueError(problem, "use the name shown by "
                                    "`gcloud compute reservations list`")
        return v

    @field_validator("machine_type")
    @classmethod
    def _machine(cls, v: str) -> str:
        if v not in TPU_MACHINES:
            raise FixableValueError(f"unknown TPU machine type {v!r}",
                                    f"use one of {', '.join(sorted(TPU_MACHINES))}")
        return v

    @field_validator("topology")
    @classmethod
    def _topology(cls, v: str) -> str:
        if not topology_is_well_formed(v):
            raise FixableValueError(f"{v!r} is not a topology like '4x8'",
                                    "write the slice shape as AxB, e.g. 4x8 for v6e-32")
        return v

    @field_validator("cluster_toolkit_version")
    @classmethod
    def _toolkit(cls, v: str) -> str:
        if problem := names.toolkit_version_problem(v):
            raise FixableValueError(problem, "use a release tag such as v1.103.0")
        return v

    @field_validator("authorized_cidr")
    @classmethod
    def _cidr(cls, v: str) -> str:
        try:
            ipaddress.ip_network(v.strip(), strict=False)
        except ValueError:
            raise FixableValueError(f"{v!r} is not a CIDR range",
                                    "e.g. 203.0.113.7/32; 0.0.0.0/0 opens the control plane to "
                                    "the internet") from None
        return v.strip()

    @field_validator("price_table")
    @classmethod
    def _prices(cls, v: dict[str, float]) -> dict[str, float]:
        if not v or any(price <= 0 for price in v.values()):
            raise FixableValueError("every price must be a positive USD per chip-hour",
                                    "e.g. price_table: {on-demand: 2.70}")
        return v

    @field_validator("kueue_queue")
    @classmethod
    def _queue(cls, v: str) -> str:
        if problem := names.dns_label_problem(v, "Kueue LocalQueue name"):
            raise FixableValueError(problem, "the blueprint's queue is 'user-queue'")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.price_tier not in self.price_table:
            raise _at("price_tier", f"{self.price_tier!r} is not in price_table",
                      f"use one of {', '.join(sorted(self.price_table))}")
        if problem := names.zone_problem(self.zone, self.region):
            raise _at("zone", problem, "pick a zone of the region, e.g. us-east5-b for us-east5")
        machine = TPU_MACHINES[self.machine_type]
        chips = chips_in_topology(self.topology)
        if chips % machine.chips_per_host != 0 or self.topology not in supported_topologies(machine):
            raise _at("topology", f"topology {self.topology} ({chips} chips) does not fit "
                      f"{self.machine_type} ({machine.chips_per_host} chips per host)",
                      f"{self.machine_type} supports {', '.join(supported_topologies(machine))}")
        return self

    @property
    def machine(self):
        return TPU_MACHINES[self.machine_type]

    @property
    def usd_per_chip_hour(self) -> float:
        return self.price_table[self.price_tier]

    @property
    def world_open(self) -> bool:
        return self.authorized_cidr in ("0.0.0.0/0", "::/0")

    @property
    def chips_per_slice(self) -> int:
        return chips_in_topology(self.topology)

    @property
    def total_chips(self) -> int:
        return self.chips_per_slice * self.num_slices


class LocalSection(StrictModel):
    """The rehearsal: CPU, local directories, the real MaxText programs in their own venv."""

    root: str = ".tpurl/rehearsal"
    venv: str = ".venvs/rehearsal"
    hf_check_venv: str = ".venvs/hf-check"
    venv_python: str = "3.12"
    hf_check_python: str = "3.11"
    tiny_model_seed: int = Field(0, ge=0)
    dataset_rows: int = Field(64, ge=4)
    dataset_seed: int = Field(0, ge=0)
    step_timeout_s: int = Field(1800, ge=60)

    @property
    def devices(self) -> int:
        return 1


class ModelSection(StrictModel):
    maxtext_name: str
    hf_repo: str
    hf_revision: str = "main"
    hf_token: SecretRef | None = None
    # Arguments every MaxText program of this model gets (e.g. the rehearsal's tiny sizes).
    args: dict[str, Scalar] = Field(default_factory=dict)

    _args_are_scalars = field_validator("args", mode="before")(_scalar_args)

    @field_validator("hf_token", mode="before")
    @classmethod
    def _token_is_reference(cls, v: object) -> object:
        if isinstance(v, str):
            live = names.looks_like_hf_token(v)
            leaked = " It looks like a live token: revoke it on the hub." if live else ""
            raise FixableValueError(
                "the token must be given as a reference, never as a literal value." + leaked,
                "write {env: HF_TOKEN} or {secret_block: NAME} and put the value there",
            )
        return v


class ImageSection(StrictModel):
    base: str
    repository: str | None = None
    disabled_patches: dict[str, str] = Field(default_factory=dict)

    @field_validator("base")
    @classmethod
    def _pinned(cls, v: str) -> str:
        last = v.rsplit("/", 1)[-1]
        if "@sha256:" not in v and ":" not in last:
            raise FixableValueError(f"image {v!r} has no tag or digest (it would mean :latest)",
                                    "pin it, e.g. ...tpu_post_training:0.2.4 or @sha256:...")
        return v

    @field_validator("disabled_patches")
    @classmethod
    def _reasons(cls, v: dict[str, str]) -> dict[str, str]:
        for patch_id, reason in v.items():
            if len(reason.strip()) < 10:
                raise FixableValueError(f"patch {patch_id!r} is disabled without a reason",
                                        "say why in a sentence: disabled_patches: {ID: 'why'}")
        return v


class StepSection(StrictModel):
    args: dict[str, Scalar] = Field(default_factory=dict)

    _args_are_scalars = field_validator("args", mode="before")(_scalar_args)


class DataSection(StrictModel):
    """Training data beyond what the args name: a file set announced by a dataset event.

    ``train_files`` becomes MaxText's ``hf_train_files`` (gs://…, hf://datasets/…, or a local
    parquet path in the rehearsal). Give a versioned URI (a new object per dataset version):
    it is part of the training key, so a new URI retrains and an unchanged one skips.
    """

    train_files: str | None = None


class Profile(StrictModel):
    name: str
    description: str = ""
    backend: Literal["gke", "local"]
    gke: GkeSection | None = None
    local: LocalSection | None = None
    model: ModelSection
    image: ImageSection
    convert: StepSection = StepSection()
    train: StepSection = StepSection()
    export: StepSection = StepSection()
    data: DataSection = DataSection()

    @model_validator(mode="after")
    def _backend_sections(self) -> Self:
        if self.backend == "gke" and self.gke is None:
            raise _at("gke", "backend 'gke' needs a gke section (project, region, zone, "
                      "cluster, bucket, reservation)", "add the gke: section or use backend: local")
        if self.backend == "local" and self.local is None:
            raise _at("local", "backend 'local' needs a local section", "add `local: {}`")
        if self.backend == "gke" and self.model.hf_token is None:
            raise _at("model.hf_token", "the GKE jobs download from the hub and need a token",
                      "write hf_token: {env: HF_TOKEN} or {secret_block: NAME}")
        return self

    @property
    def devices_per_slice(self) -> int:
        return self.gke.chips_per_slice if self.gke else 1

    @property
    def total_devices(self) -> int:
        return self.gke.total_chips if self.gke else 1

    @property
    def num_slices(self) -> int:
        return self.gke.num_slices if self.gke else 1


def _at(field: str, problem: str, fix: str) -> FixableValueError:
    """A model-level error that still names its field (pydantic would report the parent)."""
    error = FixableValueError(problem, fix)
    error.field = field  # type: ignore[attr-defined]
    return error


def parallelism_product(values: list[int]) -> tuple[int, int]:
    """(product of fixed values, number of -1 wildcards), MaxText's convention for 'fill in'."""
    fixed = math.prod(v for v in values if v != -1)
    return fixed, sum(1 for v in values if v == -1)
