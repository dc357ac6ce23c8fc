"""How the TPU slice is obtained (``gke.capacity``) and what each way costs per chip-hour.

Five consumption modes, the ones GKE's node pools offer for TPUs (and xpk exposes):

- ``reservation``: the tutorial's. A static pool consumes a specific reservation, which
  Compute Engine bills while it exists, whether anything trains or not (teardown removes
  the pool, not the reservation).
- ``on-demand``, ``spot``, ``flex-start``: no reservation. The pool autoscales from zero
  nodes, so chips are billed only while a workload holds them. Spot may be preempted at any
  time; flex-start (Dynamic Workload Scheduler) nodes run at most ``max_run_hours`` and need
  node auto-repair off.
- ``queued``: Dynamic Workload Scheduler's queued provisioning. Kueue's ProvisioningRequest
  admission check asks GKE for the whole slice and admits the JobSet only once every node of
  it exists (all or nothing); the pool (``enable_queued_provisioning``) scales from zero and
  its nodes, like flex-start's, live at most ``max_run_hours``.

``gke.capacity`` may name one mode or an ordered chain of them (``[flex-start, on-demand,
spot]``): the run starts in the first mode that can be had and falls back, in order, when a
mode's stockout or queue budget is spent (Kueue does not fall back on a stockout by itself:
kubernetes-sigs/kueue#2560). Every rule below applies to every mode of the chain.

The rules here are those Cluster Toolkit's gke-node-pool module enforces as Terraform
preconditions (cluster-toolkit modules/compute/gke-node-pool/main.tf): checking them when the
profile loads turns a failed ``gcluster deploy`` minutes in into a profile error up front.

Prices carry their source and the date they were read, because TPU prices change and a plan
that quotes a stale number with confidence is worse than one that says where it came from.
Only list prices we can cite ship as defaults; spot and flex-start prices move (Google may
change spot prices once a month) and must be given by the profile to be compared.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import date
from typing import Annotated, Literal, TypeGuard

from pydantic import BaseModel, ConfigDict, Field

from flows.config.errors import FixableValueError
from flows.config.types import Checked

CapacityMode = Literal["reservation", "flex-start", "spot", "on-demand", "queued"]
CAPACITY_MODES: tuple[CapacityMode, ...] = ("reservation", "flex-start", "spot", "on-demand",
                                            "queued")


def is_capacity_mode(value: str) -> TypeGuard[CapacityMode]:
    """Whether ``value`` (a node pool's label, a command-line choice) names a capacity mode,
    so the prices keyed by mode can be asked for it."""
    return value in CAPACITY_MODES

# GKE flex-start: a node obtained through Dynamic Workload Scheduler runs for at most seven
# days (the node pool's max_run_duration cannot exceed it); queued provisioning's
# maxRunDurationSeconds has the same ceiling.
FLEX_START_MAX_RUN_HOURS = 168.0

# Modes whose pool scales to zero between runs (no reservation is held).
SCALE_FROM_ZERO: frozenset[str] = frozenset({"flex-start", "spot", "on-demand", "queued"})
# Modes whose nodes Dynamic Workload Scheduler gives for a bounded time (gke.max_run_hours).
MAX_RUN_MODES: frozenset[str] = frozenset({"flex-start", "queued"})

CHAIN_FIX = ("write gke.capacity as one mode or an ordered list without repeats, e.g. "
             "gke.capacity: [flex-start, on-demand, spot] (on the command line: --set "
             "gke.capacity=flex-start,on-demand,spot); modes: " + ", ".join(CAPACITY_MODES))


def chain_of(capacity: CapacityMode | Sequence[CapacityMode]) -> tuple[CapacityMode, ...]:
    """The ordered modes of ``gke.capacity`` (one mode is a chain of one); pure."""
    return (capacity,) if isinstance(capacity, str) else tuple(capacity)


def split_listed(value: object) -> object:
    """A list written as text (``--set gke.capacity=flex-start,on-demand``, an environment
    variable) → the list; anything else unchanged, for the field's own validation."""
    if isinstance(value, str) and "," in value:
        return [part.strip() for part in value.split(",") if part.strip()]
    return value


def chain_problem(chain: tuple[str, ...]) -> str | None:
    """What is wrong with the chain's shape itself (not its modes' needs); pure.

    Why reservation first: a reservation bills its hosts whether they are used or not, so
    falling back to it after paying for another mode is never cheaper than starting there;
    a chain that lists it later is a mistake in the order."""
    if not chain:
        return "gke.capacity names no mode"
    if repeated := sorted({m for m in chain if chain.count(m) > 1}):
        return f"gke.capacity names {', '.join(repeated)} more than once"
    if "reservation" in chain and chain[0] != "reservation":
        return ("gke.capacity lists reservation after another mode: the reservation bills "
                "whether used or not, so it must be tried first")
    return None



def _source(value: str) -> str:
    if not value.strip():
        raise FixableValueError("a price needs its source", "give the page or quote it was read "
                                "from, e.g. https://cloud.google.com/tpu/pricing")
    return value.strip()

class ModePrice(BaseModel):
    """One mode's price: USD per chip-hour, where the figure comes from and when it was read."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    usd_per_chip_hour: float = Field(gt=0)
    """The price of one chip for one hour in this mode."""
    source: Annotated[str, Checked(_source, "not blank")]
    """Where the price comes from (a page or a quote)."""
    as_of: date
    """The date the price was read."""



_PRICING_PAGE = "https://cloud.google.com/tpu/pricing (TPU v6e, US regions, list price at GA)"

# Trillium (v6e) list prices, US regions, as published when v6e became generally available
# (December 2024): on-demand $2.70, 1-year commitment $1.89, 3-year $1.22 per chip-hour. A
# reservation without a commitment is billed at the on-demand rate; a profile with a
# committed-use discount sets its reservation price to the committed rate.
V6E_DEFAULT_PRICES: dict[CapacityMode, ModePrice] = {
    "reservation": ModePrice(usd_per_chip_hour=2.70, source=_PRICING_PAGE + "; a reservation "
                             "without commitment bills at on-demand", as_of=date(2024, 12, 11)),
    "on-demand": ModePrice(usd_per_chip_hour=2.70, source=_PRICING_PAGE,
                           as_of=date(2024, 12, 11)),
}


# The cited defaults of each generation (flows/config/tpu.py's keys). v5p and tpu7x have
# none: Google's pricing page (https://cloud.google.com/tpu/pricing) as it could be read on
# 2026-12-06 showed the v2–v4 tables only, and a search of Google's TPU pages again on
# 2026-12-06 found no v5p or TPU7x (Ironwood) figure in any mode (the v5p and TPU7x pages
# give architecture, not prices; figures found elsewhere are resellers' or blogs', not
# Google's list price), so no figure is put here for them. A profile on them states its own
# prices (gke.prices, with source and date), validation refuses one that does not and says
# why (``unpriced_problem``), and the plan's comparison of generations says "price unknown"
# for a mode without one.
GENERATION_PRICES: dict[str, dict[CapacityMode, ModePrice]] = {"v6e": V6E_DEFAULT_PRICES}
# When Google's pages were last searched for the unpriced generations' prices.
UNPRICED_READ = date(2026, 12, 6)


def default_prices(generation: str) -> dict[CapacityMode, ModePrice]:
    """The cited prices a profile on ``generation`` starts from (none for an unpriced one)."""
    return dict(GENERATION_PRICES.get(generation, {}))


def price_for(prices: dict[CapacityMode, ModePrice], mode: str) -> tuple[ModePrice, str]:
    """What a pool of capacity ``mode`` bills per chip-hour, and how to say whose price it is:
    the profile's price for that mode, else the cited on-demand default (spot and flex-start
    ship none; a pool left by another mode is priced all the same, never at zero)."""
    if is_capacity_mode(mode) and mode in prices:
        return prices[mode], f"{mode} price"
    if "on-demand" in prices or not prices:
        fallback = prices.get("on-demand") or V6E_DEFAULT_PRICES["on-demand"]
        return fallback, f"on-demand price: gke.prices has no {mode}"
    # a generation without a cited on-demand price (flows/config/tpu.py): the dearest the
    # profile gives, never v6e's figure for another generation's chips
    dearest = max(prices, key=lambda m: prices[m].usd_per_chip_hour)
    return prices[dearest], f"{dearest} price, the dearest of gke.prices: it has no {mode}"


def reservation_kept(reservation: str, zone: str, project: str, usd_per_hour: float) -> str:
    """What a teardown leaves billing in reservation mode: the reservation itself. Compute
    Engine bills a reservation's hosts while it exists, consumed or not; deleting it is what
    stops the charge (cloud.google.com/compute/docs/instances/reservations-delete), and it
    cannot be deleted while a commitment holds it."""
    return (f"reservation {reservation} in {zone}: Compute Engine bills its hosts while it "
            f"exists, consumed or not (the pool's ${usd_per_hour:,.2f}/h); to end it: gcloud "
            f"compute reservations delete {reservation} --zone={zone} --project={project} "
            "(not while a commitment holds it)")


def unpriced_problem(mode: str, generation: str | None) -> str:
    """Why a mode has no price: the profile gives none, and, for a generation without cited
    defaults, Google publishes none this tool could read either, so the user must find one
    (their account team's quote, or the console's pricing for their project)."""
    said = f"no price for capacity {mode!r} in gke.prices"
    if generation is None or generation in GENERATION_PRICES:
        return said
    return (f"{said}: Google publishes no TPU {generation} list price this tool could read "
            f"(https://cloud.google.com/tpu/pricing, searched {UNPRICED_READ.isoformat()}), "
            "so none ships; a run on it is refused until the profile states one")


def price_fix(mode: str) -> str:
    return (f"add it to the profile: gke.prices: {{{mode}: {{usd_per_chip_hour: <USD>, "
            "source: <where you read it>, as_of: <YYYY-MM-DD>}} (current figures: "
            "https://cloud.google.com/tpu/pricing)")



def _run_hours_fix(train_hours: float) -> str:
    """The smallest whole gke.max_run_hours that covers the training, within the nodes'
    maximum; past that maximum no value does, and the fix says what does."""
    hours = max(1, math.ceil(train_hours))
    if hours > FLEX_START_MAX_RUN_HOURS:
        return (f"no gke.max_run_hours covers gke.estimated_hours.train = {train_hours:g} "
                f"(at most {FLEX_START_MAX_RUN_HOURS:g}): set gke.capacity=on-demand, or "
                "train in shorter runs")
    return (f"set gke.max_run_hours={hours} (the whole hours gke.estimated_hours.train = "
            f"{train_hours:g} needs; at most {FLEX_START_MAX_RUN_HOURS:g})")

def capacity_problems(chain: CapacityMode | tuple[CapacityMode, ...], reservation: str | None,
                      max_run_hours: float | None, train_hours: float
                      ) -> list[tuple[str, str, str]]:
    """(field, problem, fix) for a capacity chain and what its modes need; pure.

    Why each rule: reservation mode pins the pool to a named reservation
    (SPECIFIC_RESERVATION needs exactly one, gke-node-pool main.tf); spot, flex-start and
    queued provisioning require NO_RESERVATION ("Spot consumption option only works with
    reservation_affinity consume_reservation_type NO_RESERVATION", "enable_flex_start requires
    reservation_affinity.consume_reservation_type to be 'NO_RESERVATION'", "reservation_affinity
    should be NO_RESERVATION when enable_queued_provisioning is true"), and so does on-demand
    here, because a pool that may also take a reservation would bill it while idle. A chain
    with a reservation builds its static pool on it and the other modes' pools without.
    """
    modes = chain_of(chain)
    shown = modes[0] if len(modes) == 1 else "[" + ", ".join(modes) + "]"
    out: list[tuple[str, str, str]] = []
    if "reservation" in modes:
        if not reservation:
            out.append(("reservation", "capacity 'reservation' needs the reservation's name",
                        "set gke.reservation to one listed by `gcloud compute reservations "
                        "list`, or choose gke.capacity: on-demand, spot, flex-start or queued"))
    elif reservation:
        out.append(("reservation", f"capacity {shown} consumes no reservation, but "
                    f"gke.reservation is {reservation!r} (Cluster Toolkit's node pool refuses "
                    "a reservation with spot, flex-start and queued provisioning)",
                    "remove gke.reservation from the profile (or pass --set "
                    "gke.reservation= to empty it), or put reservation first in gke.capacity"))
    bounded = [m for m in modes if m in MAX_RUN_MODES]
    if bounded:
        which = " and ".join(bounded)
        if max_run_hours is None:
            out.append(("max_run_hours", f"{which} nodes stop after their maximum run "
                        "duration; the profile must say how long the training may hold them",
                        _run_hours_fix(train_hours)))
        elif max_run_hours > FLEX_START_MAX_RUN_HOURS:
            out.append(("max_run_hours", f"{max_run_hours:g} h exceeds {which}'s maximum "
                        f"of {FLEX_START_MAX_RUN_HOURS:g} h (seven days)",
                        f"set gke.max_run_hours={FLEX_START_MAX_RUN_HOURS:g}"))
        elif max_run_hours < train_hours:
            out.append(("max_run_hours", f"{max_run_hours:g} h is shorter than the estimated "
                        f"training ({train_hours:g} h): the {which} nodes would be reclaimed "
                        "before it ends, every time",
                        f"{_run_hours_fix(train_hours)}, or lower gke.estimated_hours.train if "
                        "the estimate is wrong"))
    elif max_run_hours is not None:
        out.append(("max_run_hours", "max_run_hours applies to flex-start and queued only, "
                    f"not {shown}",
                    "pass --set gke.max_run_hours= (or delete it from the profile file), or "
                    "add flex-start or queued to gke.capacity"))
    return out


def section_problems(chain: tuple[str, ...], priced: set[str], preemption_budget: int | None,
                     conversion_placement: str, generation: str | None = None
                     ) -> list[tuple[str, str, str]]:
    """(field, problem, fix) of the rest of the GKE section a chain constrains: a price for
    each mode (first; ``generation``: the machine type's, to say when Google publishes none),
    a preemption budget for spot, conversions off the TPU hosts for a mode that brings TPU
    nodes up only for training. Pure."""
    out = [("prices", unpriced_problem(mode, generation), price_fix(mode))
           for mode in chain if mode not in priced]
    if "spot" in chain and preemption_budget == 0:
        out.append(("preemption_budget", "spot nodes are preempted at any time; "
                    "with preemption_budget 0 the first preemption fails the run "
                    "instead of resuming from the newest checkpoint",
                    "leave gke.preemption_budget unset (3) or set it to 1 or more"))
    from_zero = [m for m in chain if m in SCALE_FROM_ZERO]
    if from_zero and conversion_placement == "tpu-hosts":
        out.append(("conversion_placement", f"capacity {', '.join(from_zero)} brings "
                    "TPU nodes up only for training; conversion_placement tpu-hosts "
                    "would scale the whole slice up for a CPU job",
                    "set gke.conversion_placement: cpu-pool (the default)"))
    return out


# What capacity_problems, section_problems and run_budget_problem refuse, in words for the
# profile page (GkeSection._capacity_needs declares these: flows/config/limits.py).
CAPACITY_LIMITS: dict[str, list[str]] = {
    "reservation": ["required when gke.capacity holds reservation; not set otherwise"],
    "max_run_hours": [f"required with flex-start or queued, not set without; at most "
                      f"{FLEX_START_MAX_RUN_HOURS:g} and at least gke.estimated_hours.train"],
    "prices": ["a price for every mode of gke.capacity"],
    "preemption_budget": ["not 0 when gke.capacity holds spot"],
    "conversion_placement": ["cpu-pool when gke.capacity holds a mode that scales from zero "
                             f"({', '.join(sorted(SCALE_FROM_ZERO))})"],
    "train_run_budget_s": ["with flex-start or queued: at most gke.max_run_hours x 3600"],
    "run_budget_s": ["with flex-start or queued and no gke.train_run_budget_s: at most "
                     "gke.max_run_hours x 3600"],
}
CHAIN_LIMIT = "one mode or a list with no repeats; reservation, when listed, first"

def listed_modes(value: object) -> object:
    """``gke.capacity`` as given → one mode or a list of them: text with commas is a list
    (--set, environment), a list of one is that mode (so [on-demand] and on-demand are the
    same profile); an unknown mode is refused naming the modes."""
    value = split_listed(value)
    listed = list(value) if isinstance(value, (list, tuple)) else [value]
    if unknown := [m for m in listed if m not in CAPACITY_MODES]:
        raise FixableValueError(f"{', '.join(map(repr, unknown))} is not a capacity mode",
                                CHAIN_FIX)
    return listed[0] if len(listed) == 1 else listed


def run_budget_problem(max_run_hours: float | None, field: str, budget_s: float | None,
                       stage: str) -> tuple[str, str, str] | None:
    """(field, problem, fix) when a flex-start (or queued) stage on the slice may run longer, by its watch
    budget (gke.train_run_budget_s / gke.run_budget_s, per JobSet attempt), than its nodes
    live: GKE ends a flex-start node max_run_duration after it started, whatever runs on it,
    so the attempt is cut off (and resubmitted as a disruption) before the budget could
    bound it, and a plan that promises that long a run is wrong. Only a budget the profile
    sets is refused; the monitor's default (24 h) is no statement about the run. Pure."""
    if max_run_hours is None or budget_s is None or budget_s <= max_run_hours * 3600:
        return None
    return (field, f"{budget_s:g} s ({budget_s / 3600:g} h) lets the {stage} run longer than "
            f"gke.max_run_hours ({max_run_hours:g} h): flex-start and queued nodes end after "
            "their maximum run duration, so no attempt can run that long",
            f"set gke.{field}={max_run_hours * 3600:g} (gke.max_run_hours x 3600), "
            f"or raise gke.max_run_hours (at most {FLEX_START_MAX_RUN_HOURS:g})")
