"""The profile's TPU slices, how they are had, and their price (``gke.machine_type`` ...
``gke.estimated_hours``): the ``GkeCapacity`` part of ``GkeSection`` (flows/config/gke.py).

Its derived values (chips, hosts, the capacity chain, a mode's price, the idle cost) are what
every layer reads: the blueprint's pools, the jobs' placement, the plan's dollars and the
watch's spend meter.
"""

from __future__ import annotations

from typing import Annotated, Literal, Self

from pydantic import Field, ValidationInfo, field_validator, model_validator

from flows.config.capacity import (
    CHAIN_FIX,
    CHAIN_LIMIT,
    MAX_RUN_MODES,
    SCALE_FROM_ZERO,
    V6E_DEFAULT_PRICES,
    CapacityMode,
    ModePrice,
    chain_of,
    chain_problem,
    default_prices,
    is_capacity_mode,
    listed_modes,
)
from flows.config.errors import FixableValueError
from flows.config.limits import limits, reshapes
from flows.config.section_base import StrictModel, check
from flows.config.tpu import (
    TPU_MACHINES,
    TpuMachine,
    chips_in_topology,
    supported_topologies,
    topology_is_well_formed,
)
from flows.config.types import Checked, refusing

# the tutorial's figures where the profile gives none (a stated train_timeline replaces train)
# the stages that hold TPU chips, each with its planned hours
HourlyStage = Literal["convert", "train", "export", "evaluate"]
DEFAULT_ESTIMATED_HOURS: dict[HourlyStage, float] = {"convert": 0.5, "train": 4.0, "export": 0.5}



V5E_PREFIX = "ct5lp-"  # GKE's v5e machine types (ct5lp-hightpu-1t, -4t, -8t)


def nearest_topology(machine: TpuMachine, chips: int) -> str:
    """The machine's supported topology with the fewest chips at least ``chips`` (its
    largest when none has as many): what a topology it does not support is changed to."""
    listed = sorted(supported_topologies(machine), key=chips_in_topology)
    return next((t for t in listed if chips_in_topology(t) >= chips), listed[-1])

class _DefaultPrices(dict[CapacityMode, ModePrice]):
    """The field's default, told apart from a profile's own prices by its type: the default
    is replaced by the machine type's generation's cited prices."""



def _machine_problem(value: str) -> str | None:
    if value.startswith(V5E_PREFIX):
        return (f"TPU v5e ({value}) is not supported: MaxText 0.2.4, the pinned release, ships "
                "GRPO launches on Pathways for v6e, v5p and tpu7x only (its "
                "trainers/post_train/rl/scripts), none for v5e; docs/explanation/throughput.md "
                "says what a later MaxText would need")
    return None if value in TPU_MACHINES else f"unknown TPU machine type {value!r}"


def _chain(value: CapacityMode | list[CapacityMode]) -> CapacityMode | list[CapacityMode]:
    check(chain_problem(chain_of(value)), CHAIN_FIX)
    return value


MachineType = Annotated[str, Checked(refusing(
    _machine_problem, f"use one of {', '.join(sorted(TPU_MACHINES))}"),
    enum=sorted(TPU_MACHINES))]
Topology = Annotated[str, Checked(refusing(
    lambda v: None if topology_is_well_formed(v) else f"{v!r} is not a topology like '4x8'",
    "write the slice shape as AxB, e.g. 4x8 for v6e-32"), "a slice shape AxB (or AxBxC), e.g. 4x8")]
# text with commas is a list (--set, environment); a list of one is that mode, so a profile
# that writes [on-demand] is the profile that writes on-demand
CapacityChain = Annotated[CapacityMode | list[CapacityMode], Checked(_chain, CHAIN_LIMIT),
                          Checked(listed_modes, "each an allowed mode; text with commas is a "
                                  "list, a list of one that mode", before=True)]

class GkeCapacity(StrictModel):
    """The TPU slices (``num_slices`` of ``topology``), how they are obtained and their price.

    ``capacity`` picks the consumption mode (flows/config/capacity.py): the tutorial's static
    pool on a reservation, or a pool that scales from zero (on-demand, spot, flex-start).
    """

    machine_type: MachineType = "ct6e-standard-4t"
    """The TPU VM type of the slice (ct6e-standard-4t: 4 v6e chips per host)."""
    topology: Topology = "4x8"
    """The slice's TPU topology (4x8 = 32 chips)."""
    # One count for the pool and the jobs: the blueprint's num_slices (one node pool per
    # slice), JobSet's worker replicas and Pathways' --instance_count.
    num_slices: int = Field(1, ge=1)
    """How many slices training spans (multislice over DCN)."""
    capacity: CapacityChain = "reservation"
    """How the TPU slice is had: reservation, flex-start, spot, on-demand or queued; or an
    ordered list of them, tried in turn (e.g. [flex-start, on-demand, spot])."""
    max_run_hours: float | None = Field(None, gt=0)  # flex-start, queued: the node's lifetime
    """Flex-start and queued only: how long their nodes live (at most 168)."""
    prices: dict[CapacityMode, ModePrice] = Field(
        default_factory=lambda: _DefaultPrices(V6E_DEFAULT_PRICES), validate_default=True)
    """The USD per chip-hour of each capacity mode, with its source and date."""
    # evaluate: unset derives it from train's (flows/config/eval_hours.py)
    # hours a stage holds what it runs on: positive (a zero or negative one would price the
    # run below its cost and let a spend cap or flex-start's max_run_hours pass unchecked)
    estimated_hours: dict[HourlyStage, Annotated[float, Field(gt=0)]] = Field(
        default_factory=lambda: dict(DEFAULT_ESTIMATED_HOURS))
    """Planned hours per TPU stage: the plan's chip-hours, dollars and bounds."""





    @field_validator("prices", mode="before")
    @classmethod
    @reshapes("a profile's prices add to or replace the cited defaults of its machine type's "
              "generation (none for v5p and tpu7x)")
    def _prices_over_defaults(cls, v: object, info: ValidationInfo) -> object:
        """A profile adds or overrides prices; the cited defaults of the machine type's
        generation stay for the other modes. The field's default is v6e's: a profile naming
        another generation and no prices starts from that generation's (maybe none), never
        from v6e's figures."""
        machine = TPU_MACHINES.get(str(info.data.get("machine_type", "")))
        if isinstance(v, _DefaultPrices):  # the profile gives none
            v = {}
        if isinstance(v, dict):
            base = default_prices(machine.generation) if machine else dict(V6E_DEFAULT_PRICES)
            return {**base, **v}
        return v

    @model_validator(mode="after")
    @limits({"topology": "one the machine type supports: " + "; ".join(
        f"{name} {', '.join(supported_topologies(machine))}"
        for name, machine in TPU_MACHINES.items())})
    def _pool_is_consistent(self) -> Self:
        machine, chips = self.machine, self.chips_per_slice
        if chips % machine.chips_per_host != 0 or self.topology not in supported_topologies(machine):
            raise FixableValueError(
                f"topology {self.topology} ({chips} chips) does not fit {self.machine_type} "
                f"({machine.chips_per_host} chips per host)",
                f"set gke.topology={nearest_topology(machine, chips)} (the smallest "
                f"{self.machine_type} topology with at least {chips} chips; it supports "
                f"{', '.join(supported_topologies(machine))})",
                field="topology")
        return self

    @property
    def machine(self) -> TpuMachine:
        return TPU_MACHINES[self.machine_type]

    @property
    def chips_per_host(self) -> int:
        return self.machine.chips_per_host

    @property
    def chips_per_slice(self) -> int:
        return chips_in_topology(self.topology)

    @property
    def hosts_per_slice(self) -> int:
        return self.chips_per_slice // self.chips_per_host

    @property
    def total_chips(self) -> int:
        return self.chips_per_slice * self.num_slices

    @property
    def hosts_needed(self) -> int:
        return self.hosts_per_slice * self.num_slices

    @property
    def capacity_chain(self) -> tuple[CapacityMode, ...]:
        """The capacity modes in the order they are tried (one mode: a chain of one)."""
        return chain_of(self.capacity)

    def mode_usd_per_chip_hour(self, mode: str) -> float:
        """The profile's price of one mode of the chain (validation makes sure it has one)."""
        if not is_capacity_mode(mode):
            raise KeyError(mode)
        return self.prices[mode].usd_per_chip_hour

    @property
    def usd_per_chip_hour(self) -> float:
        """The price of the chain's first mode: what a run pays when it is served as hoped."""
        return self.mode_usd_per_chip_hour(self.capacity_chain[0])

    @property
    def priciest_mode(self) -> CapacityMode:
        """The chain's most expensive mode (the first of equals): what a cap must admit, since
        a run may be served by any mode of the chain."""
        return max(self.capacity_chain, key=self.mode_usd_per_chip_hour)

    @property
    def bounded_run(self) -> bool:
        """True when some mode of the chain gives nodes for max_run_hours only."""
        return any(m in MAX_RUN_MODES for m in self.capacity_chain)

    @property
    def scales_from_zero(self) -> bool:
        """True when no TPU node is held while nothing trains: every mode of the chain scales
        from zero (a reservation in the chain keeps its static pool)."""
        return all(m in SCALE_FROM_ZERO for m in self.capacity_chain)

    @property
    def idle_usd_per_hour(self) -> float:
        """What the TPU pools cost per hour while nothing trains: the whole static pool on a
        reservation, nothing for pools that scale from zero."""
        if "reservation" not in self.capacity_chain:
            return 0.0
        return self.total_chips * self.mode_usd_per_chip_hour("reservation")
